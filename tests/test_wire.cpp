// The wire codec (core/trace/wire.h): what one process recorded comes back whole in another, and
// damaged bytes are refused with a message rather than read as nonsense.
#include "core/trace/wire.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace scalelab {
namespace {

Records sample_records() {
  Records r;
  Event e;
  e.device = 3;
  e.lane = Lane::comm;
  e.kind = "all_reduce";
  e.name = "bucket 2 — ring step 5";  // non-ASCII survives
  e.phase = Phase::comm;
  e.t_begin_ns = -7;
  e.t_end_ns = 1'234'567'890'123;
  e.bytes = 1 << 20;
  e.flops = 2.5e12;
  e.step = 41;
  e.micro_batch = 2;
  e.bucket = 2;
  e.layer = 1;
  e.peer = 0;
  e.flow_id = 99;
  e.role = Role::all_reduce;
  e.group = "tp";
  r.events.push_back(e);
  r.events.push_back(Event{});
  r.memory.push_back({3, 77, MemoryCategory::comm_buffers, 4096});
  r.metrics.push_back({41, "loss", 0.125});
  DeviceRecord d;
  d.index = 3;
  d.description = {"sim:3 (a100-nvlink-8)", "sim:3", R"({"name": "a100-nvlink-8"})", 80LL << 30};
  d.capacity = 80LL << 30;
  d.peak = {1, 2, 3, 4, 5, 6};
  d.peak_total = 21;
  r.devices.push_back(d);
  return r;
}

TEST(Wire, RoundTripsEveryField) {
  const Records in = sample_records();
  const std::vector<uint8_t> bytes = encode_records(in);
  const Records out = decode_records(bytes.data(), bytes.size());
  ASSERT_EQ(out.events.size(), 2u);
  const Event& a = in.events[0];
  const Event& b = out.events[0];
  EXPECT_EQ(b.device, a.device);
  EXPECT_EQ(b.lane, a.lane);
  EXPECT_EQ(b.kind, a.kind);
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.phase, a.phase);
  EXPECT_EQ(b.t_begin_ns, a.t_begin_ns);
  EXPECT_EQ(b.t_end_ns, a.t_end_ns);
  EXPECT_EQ(b.bytes, a.bytes);
  EXPECT_EQ(b.flops, a.flops);
  EXPECT_EQ(b.step, a.step);
  EXPECT_EQ(b.micro_batch, a.micro_batch);
  EXPECT_EQ(b.bucket, a.bucket);
  EXPECT_EQ(b.layer, a.layer);
  EXPECT_EQ(b.peer, a.peer);
  EXPECT_EQ(b.flow_id, a.flow_id);
  EXPECT_EQ(b.role, a.role);
  EXPECT_EQ(b.group, a.group);
  EXPECT_EQ(out.events[1].flow_id, -1);
  ASSERT_EQ(out.memory.size(), 1u);
  EXPECT_EQ(out.memory[0].category, MemoryCategory::comm_buffers);
  EXPECT_EQ(out.memory[0].bytes, 4096);
  ASSERT_EQ(out.metrics.size(), 1u);
  EXPECT_EQ(out.metrics[0].name, "loss");
  EXPECT_EQ(out.metrics[0].value, 0.125);
  ASSERT_EQ(out.devices.size(), 1u);
  EXPECT_EQ(out.devices[0].description, in.devices[0].description);
  EXPECT_EQ(out.devices[0].capacity, in.devices[0].capacity);
  EXPECT_EQ(out.devices[0].peak, in.devices[0].peak);
  EXPECT_EQ(out.devices[0].peak_total, 21);
}

TEST(Wire, EmptyRecordsRoundTrip) {
  const std::vector<uint8_t> bytes = encode_records(Records{});
  const Records out = decode_records(bytes.data(), bytes.size());
  EXPECT_TRUE(out.events.empty() && out.memory.empty() && out.metrics.empty() && out.devices.empty());
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& says) {
  try {
    decode_records(bytes.data(), bytes.size());
    FAIL() << "decoded damaged bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[trace]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Wire, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = encode_records(sample_records());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decode_records(cut.data(), cut.size()), Error) << "cut at " << n;
  }
}

TEST(Wire, DamageIsNamed) {
  std::vector<uint8_t> bytes = encode_records(sample_records());
  std::vector<uint8_t> magic = bytes;
  magic[0] ^= 1;
  expect_refused(magic, "not scalelab's wire format");
  std::vector<uint8_t> count = bytes;
  count[8 + 7] = 0x7f;  // the event count's top byte: far more events than bytes
  expect_refused(count, "does not fit");
  std::vector<uint8_t> lane = bytes;
  lane[16 + 4] = 9;  // the first event's lane
  expect_refused(lane, "lane 9 is out of range");
  std::vector<uint8_t> extra = bytes;
  extra.push_back(0);
  expect_refused(extra, "left over");
}

}  // namespace
}  // namespace scalelab
