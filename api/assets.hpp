// Files the server answers from memory: the status page (web/) and the Debian-packaged
// JavaScript it uses (Chart.js, highlight.js), embedded at build time (CMake's
// kforge_embed_assets), so a GPU host without network still shows the page.
#pragma once

#include <string_view>
#include <vector>

namespace kforge::embedded {

struct Asset {
  std::string_view url;  // e.g. "/web/app.js"
  std::string_view bytes;
};

const std::vector<Asset>& assets();

}  // namespace kforge::embedded
