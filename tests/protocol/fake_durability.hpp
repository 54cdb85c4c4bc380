#pragma once
// FakeDurability: the protocol suite's stand-in for the durability log
// (kv::store::Durability). Records every record_set(), record_del() and record_expire() and
// answers what the test sets.
#include <cstdint>
#include <string>
#include <vector>

#include "kv/store/durability.hpp"

namespace rkv::test {

class FakeDurability final : public kv::store::Durability {
 public:
  struct Record {
    std::string key;
    std::string value;
    const char* value_ptr;  // where the value was read from (zero-copy checks)
    kv::store::LargeRef large;     // the pin the log would hold until written
    std::uint64_t token;
    std::uint32_t wait;  // what on_durable() is called with
    bool del = false;  // a record_del(): a tombstone, no value
    kv::store::ExpireAt expire_at = kv::store::kNoExpiry;  // record_set's, or record_expire's
    bool expire = false;  // a record_expire()
  };
  kv::store::DurableAck answer = kv::store::DurableAck::later;
  std::vector<Record> records;
  int flushes = 0;

  kv::store::DurableAck record_set(std::string_view key, std::string_view value, const kv::store::LargeRef& large,
                                   kv::store::ExpireAt expire_at, std::uint64_t token,
                                   std::uint32_t wait) noexcept override {
    records.push_back({std::string(key), std::string(value), value.data(), large, token, wait, false, expire_at});
    return answer;
  }
  kv::store::DurableAck record_expire(std::string_view key, kv::store::ExpireAt expire_at, std::uint64_t token,
                                      std::uint32_t wait) noexcept override {
    records.push_back({std::string(key), std::string(), nullptr, {}, token, wait, false, expire_at, true});
    return answer;
  }
  kv::store::DurableAck record_del(std::string_view key, std::uint64_t token, std::uint32_t wait) noexcept override {
    records.push_back({std::string(key), std::string(), nullptr, {}, token, wait, true});
    return answer;
  }
  void record_eviction(std::string_view key) noexcept override {
    records.push_back({std::string(key), std::string(), nullptr, {}, 0, 0, true});
  }
  void flush() noexcept override { ++flushes; }
  void append_stats(kv::store::StatRows& rows) const override { rows.push_back({"fake", 1, kv::store::StatKind::gauge, "a fake durability"}); }
  void append_histograms(std::string& out) const override { out += "# a fake durability's histograms\n"; }
};

}  // namespace rkv::test
