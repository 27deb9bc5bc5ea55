#include "api/tls.hpp"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>

namespace kforge::api {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

constexpr size_t kMaxPemBytes = 1 << 20;  // a certificate chain is a few KiB

// The whole file, or the reason it cannot be read.
core::Result<std::string> read_file(const char* option, const std::filesystem::path& file) {
  auto refuse = [&](const std::string& why) {
    return core::fail(core::ErrorKind::kBadRequest,
                      std::string("cannot read ") + option + " " + file.string() + ": " + why);
  };
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) return refuse("it is a directory");
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) return refuse(errno ? std::strerror(errno) : "cannot open it");
  std::string bytes(kMaxPemBytes + 1, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.bad()) return refuse(errno ? std::strerror(errno) : "read error");
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (bytes.size() > kMaxPemBytes) return refuse("over 1 MiB, not a PEM file");
  return bytes;
}

BioPtr memory_bio(const std::string& bytes) {
  return BioPtr(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

std::string asn1_time(const ASN1_TIME* t) {
  std::tm tm{};
  if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return "(unreadable date)";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string subject(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253) < 0)
    return "?";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  std::string s = n > 0 ? std::string(data, static_cast<size_t>(n)) : "";
  return s.empty() ? "(empty subject)" : s;
}

}  // namespace

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

core::Result<std::string> check_tls_files(const std::filesystem::path& cert_file,
                                          const std::filesystem::path& key_file) {
  ERR_clear_error();
  auto cert_pem = read_file("--tls-cert", cert_file);
  if (!cert_pem) return std::unexpected(cert_pem.error());
  auto key_pem = read_file("--tls-key", key_file);
  if (!key_pem) return std::unexpected(key_pem.error());

  std::unique_ptr<X509, X509Free> cert;
  if (BioPtr bio = memory_bio(*cert_pem); bio)
    cert.reset(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    ERR_clear_error();
    return core::fail(core::ErrorKind::kBadRequest,
                      "--tls-cert " + cert_file.string() + " holds no PEM certificate");
  }
  // A passphrase callback that gives none: an encrypted key fails here rather than
  // OpenSSL asking for its passphrase on the terminal.
  auto no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<EVP_PKEY, KeyFree> key;
  if (BioPtr bio = memory_bio(*key_pem); bio)
    key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  if (!key) {
    ERR_clear_error();
    return core::fail(
        core::ErrorKind::kBadRequest,
        "--tls-key " + key_file.string() +
            " holds no PEM private key (or an encrypted one: kforge takes an unencrypted key)");
  }
  const std::string name = subject(cert.get());
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return core::fail(core::ErrorKind::kBadRequest,
                      "--tls-key " + key_file.string() +
                          " is not the private key of the certificate in " + cert_file.string() +
                          " (" + name + ")");
  }
  const ASN1_TIME* not_before = X509_get0_notBefore(cert.get());
  const ASN1_TIME* not_after = X509_get0_notAfter(cert.get());
  const std::string dates =
      "valid from " + asn1_time(not_before) + " until " + asn1_time(not_after);
  // X509_cmp_current_time: -1 when the time is before now, 1 after, 0 on an unreadable time.
  const int after = X509_cmp_current_time(not_after);
  const int before = X509_cmp_current_time(not_before);
  if (after == 0 || before == 0) {
    return core::fail(core::ErrorKind::kBadRequest,
                      "--tls-cert " + cert_file.string() + " has unreadable validity dates");
  }
  if (after < 0) {
    return core::fail(core::ErrorKind::kBadRequest,
                      "--tls-cert " + cert_file.string() + " (" + name + ") has expired: " + dates);
  }
  if (before > 0) {
    return core::fail(core::ErrorKind::kBadRequest, "--tls-cert " + cert_file.string() + " (" +
                                                        name + ") is not valid yet: " + dates);
  }
  // Last, the pair as a TLS server takes it (what httplib's SSLServer does): this refuses
  // what the checks above pass but OpenSSL's security level does not (an RSA key of 1024
  // bits at Debian's level 2: "ee key too small").
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx || SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = openssl_errors();
    return core::fail(core::ErrorKind::kBadRequest,
                      "--tls-cert " + cert_file.string() + " with --tls-key " + key_file.string() +
                          " is refused by OpenSSL's TLS" + (why.empty() ? "" : ": " + why));
  }
  return name + ", " + dates;
}

}  // namespace kforge::api
