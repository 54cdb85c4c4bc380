// KeyTable (kv/store/key_table.hpp): the Store's open-addressing map.
#include "kv/store/key_table.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace rkv::kv::store {
namespace {

using KeyTableOfStrings = KeyTable<std::string>;

KeyTableOfStrings::Node* add_key(KeyTableOfStrings& t, const std::string& k, const std::string& v) {
  return t.insert_new(k, t.hash(k), v);
}

// Random inserts, overwrites and erases, checked after every step against
// std::unordered_map: every key found with its value, none found that is not
// there, and candidate() (for prefetching) names what find() finds.
TEST(KeyTable, AgreesWithUnorderedMapUnderRandomChurn) {
  KeyTableOfStrings t;
  std::unordered_map<std::string, std::string> ref;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 60000; ++step) {
    const std::string k = "k" + std::to_string(rng() % 3000);
    const auto r = rng() % 10;
    t.prefetch_slot(t.hash(k));
    KeyTableOfStrings::Node* n = t.find(k);
    ASSERT_EQ(n != nullptr, ref.contains(k)) << k << " at step " << step;
    // The prefetching guess, which compares hashes only, names the same node
    // (these 3,000 keys' 64-bit hashes do not collide).
    ASSERT_EQ(t.candidate(t.hash(k)), n) << k << " at step " << step;
    if (r < 6) {
      const std::string v = "v" + std::to_string(step);
      if (n != nullptr) {
        n->second = v;
      } else {
        ASSERT_EQ(add_key(t, k, v)->first, k);
      }
      ref[k] = v;
    } else if (n != nullptr) {
      t.erase(n);
      ref.erase(k);
    }
    ASSERT_EQ(t.size(), ref.size());
  }
  for (const auto& [k, v] : ref) {
    const KeyTableOfStrings::Node* n = t.find(k);
    ASSERT_NE(n, nullptr) << k;
    EXPECT_EQ(n->second, v);
  }
  std::size_t walked = 0;
  t.for_each([&](KeyTableOfStrings::Node& n) {
    ++walked;
    EXPECT_EQ(ref.at(n.first), n.second);
  });
  EXPECT_EQ(walked, ref.size());
  EXPECT_LE((t.size() + t.tombstones()) * 4, t.slot_count() * 3) << "a probe always meets an empty slot";
}

// Nodes never move: pointers to them and into their keys and values stay
// valid across the rebuilds that growing from 16 slots to 64Ki makes.
TEST(KeyTable, NodesStayPutAcrossRebuilds) {
  KeyTableOfStrings t;
  KeyTableOfStrings::Node* first = add_key(t, "first", "value");
  const char* key_bytes = first->first.data();
  const std::uint64_t layout = t.layout();
  for (int i = 0; i < 40000; ++i) add_key(t, "k" + std::to_string(i), "v");
  EXPECT_GT(t.layout(), layout + 10) << "grown by doubling";
  EXPECT_EQ(t.find("first"), first);
  EXPECT_EQ(first->first.data(), key_bytes);
  EXPECT_EQ(first->second, "value");
  EXPECT_GE(t.slot_count() * 3, t.size() * 4);
}

// A table whose size stays the same while its keys change (a cache's
// steady state) reuses its tombstones or rebuilds in place: it never grows
// past the size its live keys need, and erasing a whole run leaves no tombstone.
TEST(KeyTable, ChurnAtAConstantSizeDoesNotGrowTheTable) {
  KeyTableOfStrings t;
  for (int i = 0; i < 1000; ++i) add_key(t, "k" + std::to_string(i), "v");
  const std::size_t slots = t.slot_count();
  for (int i = 1000; i < 200000; ++i) {
    t.erase(t.find("k" + std::to_string(i - 1000)));
    add_key(t, "k" + std::to_string(i), "v");
    ASSERT_EQ(t.slot_count(), slots) << "after " << i - 999 << " replacements";
  }
  EXPECT_EQ(t.size(), 1000u);
  for (int i = 199000; i < 200000; ++i) t.erase(t.find("k" + std::to_string(i)));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.tombstones(), 0u) << "every run ended in an empty slot, so nothing is left behind";
  for (std::size_t i = 0; i < t.slot_count(); ++i) EXPECT_EQ(t.at(i), nullptr);
}

// Keys that differ only in length or in one byte, and the empty key, are
// told apart (the hash may collide; the comparison decides).
TEST(KeyTable, TellsApartKeysThatDifferByLengthOrOneByte) {
  KeyTableOfStrings t;
  const std::vector<std::string> keys = {"", "a", "aa", "aaa", "aaaa", "aaaaaaaa", "aaaaaaaaa", "aaaaaaab",
                                         std::string("a\0a", 3), std::string("a\0b", 3)};
  for (const auto& k : keys) add_key(t, k, "v" + k);
  for (const auto& k : keys) {
    const KeyTableOfStrings::Node* n = t.find(k);
    ASSERT_NE(n, nullptr) << k;
    EXPECT_EQ(n->second, "v" + k);
  }
  EXPECT_EQ(t.find("aaaaa"), nullptr);
  EXPECT_EQ(t.find(std::string("a\0c", 3)), nullptr);
}

// The comparison reads keys a word at a time: for every length up to 40, a
// key that differs from a stored one in any single byte is not that key.
TEST(KeyTable, EveryByteOfAKeyCounts) {
  for (std::size_t len = 1; len <= 40; ++len) {
    KeyTableOfStrings t;
    const std::string k(len, 'x');
    add_key(t, k, "v");
    for (std::size_t i = 0; i < len; ++i) {
      std::string other = k;
      other[i] = 'y';
      // The same slot run, so the comparison itself must tell them apart.
      const KeyTableOfStrings::Node* n = t.find(other, t.hash(k));
      EXPECT_EQ(n, nullptr) << "length " << len << ", byte " << i;
    }
    EXPECT_NE(t.find(k), nullptr) << len;
  }
}

// Keys of different lengths do not cancel each other out: "k0" .. "k199999"
// (2-7 bytes, each length's words alike) get 200,000 different hashes.
TEST(KeyTable, KeysOfDifferentLengthsGetDifferentHashes) {
  const KeyTableOfStrings t;
  std::unordered_map<std::uint64_t, std::string> seen;
  for (int i = 0; i < 200000; ++i) {
    const std::string k = "k" + std::to_string(i);
    const auto [it, added] = seen.emplace(t.hash(k), k);
    ASSERT_TRUE(added) << k << " has the hash of " << it->second;
  }
}

// Hash flooding: keys a writer found to share one table's slots (here, the
// low 12 bits of its hash, as a table of 4,096 slots uses) do not share
// another table's, because each table hashes from its own random seed. With
// one fixed hash all 64 would pile into one run of every table.
TEST(KeyTable, KeysChosenToCollideInOneTableSpreadInAnother) {
  const KeyTableOfStrings a;
  const KeyTableOfStrings b;
  constexpr std::uint64_t kLow = 0xFFF;
  const std::uint64_t target = a.hash("k0") & kLow;
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 64; ++i) {
    std::string k = "k" + std::to_string(i);
    if ((a.hash(k) & kLow) == target) keys.push_back(std::move(k));
  }
  const std::uint64_t in_b = b.hash(keys[0]) & kLow;
  std::size_t together = 0;
  for (const auto& k : keys) together += (b.hash(k) & kLow) == in_b ? 1 : 0;
  // keys[0] itself, and about 63/4096 others: 4 others or more has odds of about 2e-9.
  EXPECT_LE(together, 4u) << "of the 64 keys that share a slot of a, " << together << " share one of b";
}

// A move takes the nodes (the pointers stay valid) and leaves an empty table.
TEST(KeyTable, AMoveTakesTheNodes) {
  KeyTableOfStrings a;
  KeyTableOfStrings::Node* n = add_key(a, "k", "v");
  KeyTableOfStrings b(std::move(a));
  EXPECT_EQ(b.find("k"), n);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): a moved-from table is empty
  EXPECT_EQ(a.find("k"), nullptr);
  add_key(a, "k", "w");
  a = std::move(b);
  EXPECT_EQ(a.find("k"), n);
}

}  // namespace
}  // namespace rkv::kv::store
