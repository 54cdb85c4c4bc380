#pragma once
// The server's in-memory map: string keys -> values.
//
// The value representation is private: today a std::string, later large
// values will live in registered memory with reference-counted pins. Callers
// only ever see a std::string_view, so that change stays inside this class.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rkv::kv {

class Store {
 public:
  struct Lookup {
    bool found = false;
    // Valid until the next set() or erase() of the same key (or the Store's
    // destruction). Mutations of *other* keys do not invalidate it: entries
    // are node-based and never move.
    std::string_view value;
  };

  // Inserts or overwrites. Overwriting reuses the existing key (no key copy).
  void set(std::string_view key, std::string_view value);
  // Never allocates (heterogeneous lookup: the view is hashed directly).
  [[nodiscard]] Lookup get(std::string_view key) const;
  // True if the key existed.
  bool erase(std::string_view key);

  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  // Sum of key and value lengths, for stats (excludes container overhead).
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  // Transparent so find() accepts a string_view without building a string.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  // Hidden behind view(): the pinned-memory representation replaces this.
  class Value {
   public:
    explicit Value(std::string_view v) : data_(v) {}
    void assign(std::string_view v) { data_.assign(v); }
    [[nodiscard]] std::string_view view() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }

   private:
    std::string data_;
  };

  std::unordered_map<std::string, Value, Hash, std::equal_to<>> map_;
  std::size_t bytes_ = 0;
};

}  // namespace rkv::kv
