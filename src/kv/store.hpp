#pragma once
// The server's in-memory map: string keys -> values.
//
// Small values are std::strings. Large values (rendezvous path) live in
// registered memory (kv::Arena) and are held by reference count: the Store
// holds one reference, every in-flight transfer that reads the value holds
// another (a "pin"), and the memory returns to its arena when the last one
// goes. An overwrite replaces the Store's reference only, so a transfer still
// reading the old value keeps it whole.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

namespace rkv::kv {

// A value in registered memory. bytes is exactly the value (the block behind
// it may be larger); addr/rkey let a peer RDMA READ it, lkey lets the owner
// post it. The owner's shared_ptr deleter gives the block back.
struct LargeValue {
  std::span<std::byte> bytes;
  std::uint64_t addr = 0;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  [[nodiscard]] std::string_view view() const noexcept {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
};
using LargeRef = std::shared_ptr<const LargeValue>;

class Store {
 public:
  struct Lookup {
    bool found = false;
    // Valid until the next set() or erase() of the same key (or the Store's
    // destruction). Mutations of *other* keys do not invalidate it: entries
    // are node-based and never move.
    std::string_view value;
    // Set iff the value is large; holding it pins the bytes behind `value`
    // (they stay valid and unchanged even across a set() of this key).
    LargeRef large;
  };

  // Inserts or overwrites. Overwriting reuses the existing key (no key copy).
  void set(std::string_view key, std::string_view value);
  // Inserts or overwrites with a large value (no copy: the Store takes a reference).
  void set_large(std::string_view key, LargeRef value);
  // Never allocates (heterogeneous lookup: the view is hashed directly).
  [[nodiscard]] Lookup get(std::string_view key) const;
  // True if the key existed.
  bool erase(std::string_view key);

  // Calls fn(key, lookup) for every entry, in no particular order. fn must
  // not insert into or erase from the Store.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const auto& [k, v] : map_) fn(std::string_view(k), Lookup{true, v.view(), v.large()});
  }

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
  class Value {
   public:
    explicit Value(std::string_view v) : data_(std::string(v)) {}
    explicit Value(LargeRef v) : data_(std::move(v)) {}
    void assign(std::string_view v) {
      if (auto* s = std::get_if<std::string>(&data_)) {
        s->assign(v);
      } else {
        data_ = std::string(v);
      }
    }
    void assign(LargeRef v) noexcept { data_ = std::move(v); }
    [[nodiscard]] std::string_view view() const noexcept {
      if (const auto* s = std::get_if<std::string>(&data_)) return *s;
      return std::get<LargeRef>(data_)->view();
    }
    [[nodiscard]] LargeRef large() const noexcept {
      if (const auto* l = std::get_if<LargeRef>(&data_)) return *l;
      return {};
    }
    [[nodiscard]] std::size_t size() const noexcept { return view().size(); }

   private:
    std::variant<std::string, LargeRef> data_;
  };

  std::unordered_map<std::string, Value, Hash, std::equal_to<>> map_;
  std::size_t bytes_ = 0;
};

}  // namespace rkv::kv
