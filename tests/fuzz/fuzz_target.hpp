#pragma once
// What every fuzz target shares (docs/fuzzing.md). A target is one
// LLVMFuzzerTestOneInput; the same source links either with libFuzzer
// (clang, -Dfuzz=enabled: the fuzz_* executables scripts/fuzz runs) or with
// replay_main.cpp (any compiler: the replay_* executables of the `fuzz` test
// suite, which replay the seed corpus and a fixed number of mutations).
//
// FUZZ_CHECK states a property of the code under test; a violation aborts,
// which both drivers report as a crash with the input that caused it.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace rkv::fuzz {

// Consumes an input front to back; reads past the end give zeros / empty.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}
  [[nodiscard]] std::size_t left() const noexcept { return size_ - pos_; }
  [[nodiscard]] std::uint8_t u8() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  [[nodiscard]] std::uint16_t u16() noexcept {
    const std::uint16_t lo = u8();
    return static_cast<std::uint16_t>(lo | (std::uint16_t{u8()} << 8));
  }
  // Up to n bytes (fewer at the end).
  [[nodiscard]] std::span<const std::byte> bytes(std::size_t n) noexcept {
    n = n < left() ? n : left();
    const std::span<const std::byte> out(reinterpret_cast<const std::byte*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  [[nodiscard]] std::span<const std::byte> rest() noexcept { return bytes(left()); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

[[nodiscard]] inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) noexcept {
  return {reinterpret_cast<const std::byte*>(data), size};
}

[[nodiscard]] inline std::string_view as_text(std::span<const std::byte> b) noexcept {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace rkv::fuzz
