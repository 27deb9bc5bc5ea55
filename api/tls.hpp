// The certificate and key of `kforge serve --tls-cert/--tls-key`, checked at start so that a
// server never comes up with a pair that no client would accept (docs/SECURITY.md, TLS).
#pragma once

#include <filesystem>
#include <string>

#include "core/base/error.hpp"

namespace kforge::api {

// Reads both PEM files and checks that the key is the certificate's, that the certificate
// is valid now, and that OpenSSL takes the pair for a TLS server. On success, one line
// ("CN=127.0.0.1, valid from ... until ..."); otherwise kBadRequest with one line saying
// which file and what is wrong (with the dates for an expired or not yet valid
// certificate). An encrypted key is refused, not prompted for.
core::Result<std::string> check_tls_files(const std::filesystem::path& cert,
                                          const std::filesystem::path& key);

// OpenSSL's error queue of this thread as one line (and cleared): "" when empty.
std::string openssl_errors();

}  // namespace kforge::api
