#pragma once
// TempDir: a fresh directory under /tmp for one test, removed with everything
// in it when the object goes. Shared by the unit and rdma suites.

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace rkv::test {

class TempDir {
 public:
  // /tmp/rkv-<tag>-XXXXXX
  explicit TempDir(const std::string& tag) {
    std::string tmpl = "/tmp/rkv-" + tag + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace rkv::test
