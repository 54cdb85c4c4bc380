// verbs_types: the pure parts of src/verbs (no device needed; runs natively).
#include <gtest/gtest.h>

#include "verbs/completion.hpp"
#include "verbs/event_channel.hpp"
#include "verbs/mr.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::verbs {
namespace {

TEST(WrId, RoundTripsEveryField) {
  const WrId id(0xdeadbeef, 0xabcdef, WrKind::rdma_read);
  const WrId back = WrId::decode(id.encode());
  EXPECT_EQ(back.slot(), 0xdeadbeefu);
  EXPECT_EQ(back.generation(), 0xabcdefu);
  EXPECT_EQ(back.kind(), WrKind::rdma_read);
  EXPECT_EQ(back, id);
}

TEST(WrId, GenerationWrapsAt24Bits) {
  EXPECT_EQ(WrId(1, 1u << 24, WrKind::send).generation(), 0u);
  EXPECT_EQ(WrId::next_generation(WrId::kGenerationMask), 0u);
  EXPECT_EQ(WrId::next_generation(5), 6u);
}

TEST(WrId, StaleGenerationIsDetected) {
  std::uint32_t slot_gen = 41;
  const WrId posted(3, slot_gen, WrKind::recv);
  EXPECT_TRUE(posted.is_current(slot_gen));
  slot_gen = WrId::next_generation(slot_gen);  // slot freed and reused
  EXPECT_FALSE(posted.is_current(slot_gen));
}

TEST(WrId, ZeroIsKindNone) {
  EXPECT_EQ(WrId::decode(0).kind(), WrKind::none);
  EXPECT_EQ(to_string(WrId::decode(0xffULL << 56).kind()), "invalid");
}

TEST(Enums, ToStringNamesEveryValue) {
  EXPECT_EQ(to_string(CompletionStatus::flushed), "flushed");
  EXPECT_EQ(to_string(CompletionStatus::rnr_retry_exceeded), "rnr_retry_exceeded");
  EXPECT_EQ(to_string(CompletionOpcode::rdma_write), "rdma_write");
  EXPECT_EQ(to_string(CmEventType::timewait_exit), "timewait_exit");
  EXPECT_EQ(to_string(WrKind::rdma_write), "rdma_write");
  EXPECT_EQ(to_string(Access::none), "none");
  EXPECT_EQ(to_string(Access::remote_read | Access::local_write), "local_write|remote_read");
  EXPECT_TRUE(has(Access::local_write | Access::remote_write, Access::remote_write));
  EXPECT_FALSE(has(Access::remote_read, Access::remote_write));
}

TEST(Completion, StatusDetailComesFromTheProvider) {
  Completion c;
  c.raw_status = 5;  // IBV_WC_WR_FLUSH_ERR
  EXPECT_STRNE(c.status_detail(), "");
}

}  // namespace
}  // namespace rkv::verbs
