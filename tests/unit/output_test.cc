// The CLI's status table: optional telemetry columns appear only when some
// rank reports them.
#include "cli/output.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "cli/plan.h"

namespace firedrill::cli {
namespace {

v1::SessionStatus TwoRanks() {
  v1::SessionStatus st;
  st.mutable_session()->set_session_id("s-000001");
  st.mutable_session()->set_state("running");
  for (int rank = 0; rank < 2; ++rank) {
    v1::RankStatus* r = st.add_ranks();
    r->set_rank(rank);
    r->set_host("node-" + std::to_string(rank));
    r->set_state("running");
    r->set_step(40);
    r->set_step_ms(12.5);
    r->set_samples_per_s(640);
    r->set_window_steps(20);
    r->set_busy_vs_median(1.0);
  }
  return st;
}

std::string Status(const v1::SessionStatus& st) {
  std::ostringstream out;
  PrintStatus(st, out);
  return out.str();
}

// The header row of the rank table.
std::string Header(const std::string& text) {
  const size_t at = text.find("RANK");
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

TEST(BytesTest, BinaryUnits) {
  EXPECT_EQ(Bytes(0), "0 B");
  EXPECT_EQ(Bytes(512), "512 B");
  EXPECT_EQ(Bytes(1536), "1.5 KiB");
  EXPECT_EQ(Bytes(static_cast<int64_t>(41.2 * 1024 * 1024)), "41.2 MiB");
  EXPECT_EQ(Bytes(3LL << 30), "3.0 GiB");
}

TEST(PrintStatusTest, PlainJobShowsNoOptionalColumns) {
  const std::string header = Header(Status(TwoRanks()));
  ASSERT_FALSE(header.empty());
  EXPECT_NE(header.find("SAMPLES/S"), std::string::npos);
  for (const char* col : {"TOKENS/S", "PAD%", "SCALE", "MEM_PEAK"}) {
    EXPECT_EQ(header.find(col), std::string::npos) << col << " in: " << header;
  }
}

TEST(PrintStatusTest, EachColumnAppearsWhenAnyRankReportsIt) {
  v1::SessionStatus st = TwoRanks();
  st.mutable_ranks(1)->set_tokens_per_s(81920);
  EXPECT_NE(Header(Status(st)).find("TOKENS/S"), std::string::npos);
  EXPECT_EQ(Header(Status(st)).find("PAD%"), std::string::npos);

  st = TwoRanks();
  st.mutable_ranks(0)->set_padding_fraction(0.125);
  std::string text = Status(st);
  EXPECT_NE(Header(text).find("PAD%"), std::string::npos);
  EXPECT_NE(text.find("12.5"), std::string::npos) << text;
  EXPECT_EQ(Header(text).find("TOKENS/S"), std::string::npos);

  st = TwoRanks();
  st.mutable_ranks(0)->set_mem_peak_bytes(static_cast<int64_t>(41.2 * 1024 * 1024));
  text = Status(st);
  EXPECT_NE(Header(text).find("MEM_PEAK"), std::string::npos);
  EXPECT_NE(text.find("41.2 MiB"), std::string::npos) << text;
  EXPECT_EQ(Header(text).find("SCALE"), std::string::npos);
}

// Global batch, lr and loss scale: one line, in every drill
// alike (a column only fp16 jobs had would tell a learner which drill it is).
TEST(PrintStatusTest, TheTrainingLineIsTheSameInEveryJob) {
  v1::SessionStatus st = TwoRanks();
  st.mutable_job()->set_world_size(2);
  st.mutable_job()->mutable_data()->set_batch_size(32);
  for (auto& r : *st.mutable_ranks()) {
    r.set_global_batch(64);
    r.set_lr(0.02);
  }
  std::string text = Status(st);
  EXPECT_NE(text.find("training: global batch 64 (32 per rank x 1 micro-batch x 2 ranks), lr 0.02, no loss "
                      "scaling (0 optimiser steps skipped)"),
            std::string::npos)
      << text;

  st.mutable_job()->set_precision("fp16");
  st.mutable_job()->set_grad_accum_steps(4);
  for (auto& r : *st.mutable_ranks()) {
    r.set_global_batch(256);
    r.set_loss_scale(65536);
    r.set_skipped_total(3);
  }
  text = Status(st);
  EXPECT_NE(text.find("global batch 256 (32 per rank x 4 micro-batches x 2 ranks)"), std::string::npos) << text;
  EXPECT_NE(text.find("lr 0.02, loss scale 65536 (3 of 41 optimiser steps skipped so far)"), std::string::npos)
      << text;
  EXPECT_EQ(Header(text).find("SCALE"), std::string::npos) << text;

  // A healthy run's settings are withheld (the controller clears them): no
  // line, rather than one of zeros beside the deployed config.
  for (auto& r : *st.mutable_ranks()) {
    r.clear_global_batch();
    r.clear_lr();
    r.clear_loss_scale();
  }
  text = Status(st);
  EXPECT_EQ(text.find("training:"), std::string::npos) << text;
}

// The step's gradient all-reduces beside the gradients' size: how many times
// each gradient crossed the network is a division the learner makes.
TEST(PrintStatusTest, GradientAllReducesAreShownBesideTheGradientsSize) {
  v1::SessionStatus st = TwoRanks();
  std::string text = Status(st);
  EXPECT_EQ(text.find("gradient all-reduce:"), std::string::npos) << "no line before any all-reduce: " << text;
  for (auto& r : *st.mutable_ranks()) {
    r.set_allreduces_per_step(12);
    r.set_allreduce_bytes_per_step(16.0 * 1024 * 1024);
    r.set_mem_grads_bytes(4 * 1024 * 1024);
  }
  text = Status(st);
  EXPECT_NE(text.find("gradient all-reduce: 12.0 per optimiser step, carrying 16.0 MiB per step (the gradients "
                      "are 4.0 MiB)"),
            std::string::npos)
      << text;
}

TEST(PrintStatusTest, RowsStayAlignedWithOptionalColumns) {
  v1::SessionStatus st = TwoRanks();
  for (auto& r : *st.mutable_ranks()) {
    r.set_tokens_per_s(1000);
    r.set_padding_fraction(0.1);
    r.set_loss_scale(1024);
    r.set_mem_peak_bytes(2048);
  }
  st.mutable_ranks(1)->set_window_steps(0);  // no data yet: a row of dashes
  const std::string text = Status(st);
  const std::string header = Header(text);
  const size_t mem_col = header.find("MEM_PEAK");
  ASSERT_NE(mem_col, std::string::npos);
  std::istringstream lines(text.substr(text.find("RANK")));
  std::string line, row0, row1;
  std::getline(lines, line);
  std::getline(lines, row0);
  std::getline(lines, row1);
  EXPECT_EQ(row0.substr(mem_col, 7), "2.0 KiB") << text;
  EXPECT_EQ(row1.substr(mem_col, 1), "-") << text;
}

// A model-parallel job: each rank's place and groups' times in the table,
// the replicas in the training line; `probe memory` sets the measured
// breakdown beside the model's prediction per stage.
TEST(PrintStatusTest, AModelParallelJobShowsMeshPlacesAndItsGroupsTimes) {
  v1::SessionStatus st = TwoRanks();
  auto* job = st.mutable_job();
  job->set_world_size(2);
  job->mutable_model()->set_kind("gpt-tiny");
  job->mutable_model()->set_hidden(32);
  job->mutable_model()->set_layers(2);
  job->mutable_model()->set_heads(2);
  job->mutable_model()->set_seq_len(16);
  job->mutable_data()->set_batch_size(4);
  job->set_grad_accum_steps(4);
  job->mutable_optim()->set_kind("adamw");
  job->mutable_parallel()->set_pp(2);
  for (int rank = 0; rank < 2; ++rank) {
    v1::RankStatus* r = st.mutable_ranks(rank);
    r->set_window_steps(10);
    r->set_global_batch(16);
    auto* m = r->mutable_mesh();
    m->set_pp(rank);
    m->set_pp_size(2);
    m->set_tp_size(1);
    m->set_dp_size(1);
    m->set_order("tp-dp-pp");
    m->set_schedule("1f1b");
    r->set_pp_wait_ms(3.5);
    r->set_pp_bubble_fraction(0.25);
    r->set_mem_params_bytes(100000);
    r->set_mem_grads_bytes(100000);
    r->set_mem_optim_bytes(200000);
    r->set_mem_activation_peak_bytes(rank == 0 ? 400000 : 300000);
    r->set_mem_peak_bytes(900000);
  }
  std::ostringstream out;
  PrintStatus(st, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("TP/DP/PP"), std::string::npos) << text;
  EXPECT_NE(text.find("0/0/1"), std::string::npos) << text;
  EXPECT_NE(text.find("BUBBLE%"), std::string::npos) << text;
  EXPECT_NE(text.find("25.0"), std::string::npos) << text;
  EXPECT_NE(text.find("1 data-parallel replica of tp 1 x pp 2 ranks, order tp-dp-pp, 1f1b schedule"),
            std::string::npos)
      << text;

  std::ostringstream mem;
  PrintMemoryProbe(st, mem);
  const std::string m = mem.str();
  // Stage 0 holds 2 micro-batches under 1F1B with p = 2: the per-micro-batch column halves it.
  EXPECT_NE(m.find("195.3 KiB x2"), std::string::npos) << m;
  EXPECT_NE(m.find("predicted for PP2"), std::string::npos) << m;
  EXPECT_NE(m.find("MEASURED/TEXTBOOK"), std::string::npos) << m;
}

// A progress bar's estimate: the rest at the rate measured so far.
TEST(ProgressEstimate, SaysHowLongTheRestTakesOnceItCan) {
  EXPECT_EQ(Progress::Estimate(0, 50, 100, 10), "about 10 s left");
  EXPECT_EQ(Progress::Estimate(10, 20, 1000, 5), "about 8 min left");
  EXPECT_EQ(Progress::Estimate(20, 20, 100, 10), "");  // no progress yet: no guess
  EXPECT_EQ(Progress::Estimate(0, 5, 100, 0.5), "");   // too soon to say
  EXPECT_EQ(Progress::Estimate(0, 100, 100, 10), "");  // done
}

}  // namespace
}  // namespace firedrill::cli
