// Hostile input and faults (issue 13): files of the wrong kind refused before they are read, the
// temporaries of killed writers removed (only theirs), damaged counts bounded, profile numbers
// checked, divergence stopping a run, and the host-memory estimate. The command line's side is
// tests/fuzz_test.sh (ctest -L fuzz).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/data/dataset.h"
#include "core/device/sim/profile.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "run/train.h"
#include "support/errors.h"
#include "support/small_config.h"

using namespace scalelab;
using scalelab::test::message_of;
namespace fs = std::filesystem;

namespace {

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/scalelab-hostile.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name), std::ios::binary) << text; }
  std::string dir_;
};

// A pid that surely belonged to a process that has exited (reaped, so not even a zombie).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST_F(Hostile, ReadRegularFileRefusesEveryOtherKindByName) {
  write("ok", "bytes");
  EXPECT_EQ(read_regular_file(path("ok"), "checkpoint", 100, ""), "bytes");
  fs::create_directory(path("dir"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  fs::create_symlink(path("loop-b"), path("loop-a"));
  fs::create_symlink(path("loop-a"), path("loop-b"));
  auto why = [&](const std::string& p, int64_t max = 100) {
    return message_of<Error>([&] { read_regular_file(p, "checkpoint", max, "pass a checkpoint"); });
  };
  EXPECT_NE(why(path("dir")).find("is a directory"), std::string::npos) << why(path("dir"));
  EXPECT_NE(why(path("fifo")).find("FIFO"), std::string::npos);  // and it returned: no writer was awaited
  EXPECT_NE(why("/dev/zero").find("is a device"), std::string::npos);
  EXPECT_NE(why(path("loop-a")).find("loop of symbolic links"), std::string::npos);
  EXPECT_NE(why(path("missing")).find("not found"), std::string::npos);
  EXPECT_NE(why(path("ok"), 2).find("more than the 2 bytes"), std::string::npos) << why(path("ok"), 2);
  EXPECT_EQ(why(path("dir")).rfind("[checkpoint] ", 0), 0u);
  EXPECT_NE(why(path("dir")).find("— pass a checkpoint"), std::string::npos);
  // check_regular_file says the same on a path (for readers that open it themselves).
  EXPECT_NE(message_of<Error>([&] { check_regular_file(path("fifo"), "data", 100, ""); }).find("FIFO"), std::string::npos);
  EXPECT_EQ(check_regular_file(path("ok"), "data", 100, ""), 5);
}

TEST_F(Hostile, StaleTemporariesOfDeadProcessesAreRemovedOnlyTheirs) {
  const std::string target = path("run.ckpt");
  const pid_t dead = dead_pid();
  write("run.ckpt.tmp-" + std::to_string(dead), "half");               // a killed writer's: removed
  write("run.ckpt.tmp-" + std::to_string(::getpid()), "mine");         // this process's: kept
  write("run.ckpt.tmp-" + std::to_string(::getppid()), "parent's");    // a living process's: kept
  write("run.ckpt.tmp-12ab", "not a pid");                             // not ours to judge: kept
  write("other.ckpt.tmp-" + std::to_string(dead), "another target");   // another file's: kept
  EXPECT_EQ(remove_stale_temporaries(target), 1);
  EXPECT_FALSE(fs::exists(path("run.ckpt.tmp-" + std::to_string(dead))));
  EXPECT_TRUE(fs::exists(path("run.ckpt.tmp-" + std::to_string(::getpid()))));
  EXPECT_TRUE(fs::exists(path("run.ckpt.tmp-" + std::to_string(::getppid()))));
  EXPECT_TRUE(fs::exists(path("run.ckpt.tmp-12ab")));
  EXPECT_TRUE(fs::exists(path("other.ckpt.tmp-" + std::to_string(dead))));
}

TEST_F(Hostile, EveryAtomicWriteRemovesTheStaleTemporariesOfItsTarget) {
  const pid_t dead = dead_pid();
  write("a.json.tmp-" + std::to_string(dead), "half");
  write_file_atomically(path("a.json"), "{}", "train");
  EXPECT_FALSE(fs::exists(path("a.json.tmp-" + std::to_string(dead))));
  write("b.json.tmp-" + std::to_string(dead), "half");
  {
    AtomicFileWriter w(path("b.json"), "trace");
    w.write("{}");
    w.commit();
  }
  EXPECT_FALSE(fs::exists(path("b.json.tmp-" + std::to_string(dead))));
  EXPECT_EQ(read_regular_file(path("b.json"), "trace", 10, ""), "{}");
}

TEST_F(Hostile, OutputPathsAreCheckedBeforeTheRun) {
  fs::create_directory(path("dir"));
  EXPECT_NE(message_of<Error>([&] { check_output_path(path("dir"), "trace"); }).find("is a directory"), std::string::npos);
  EXPECT_NE(message_of<Error>([&] { check_output_path(path("no/t.json"), "trace"); }).find("does not exist"),
            std::string::npos);
  EXPECT_NO_THROW(check_output_path(path("t.json"), "trace"));
}

// Every writer renames a temporary over its target: a FIFO or a device there would be replaced
// (as root, --trace /dev/null would replace the machine's /dev/null). They are refused, and stay.
TEST_F(Hostile, OutputsNeverReplaceAFifoOrADevice) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const std::string why = message_of<Error>([&] { write_file_atomically(path("fifo"), "{}", "train"); });
  EXPECT_NE(why.find("is a FIFO"), std::string::npos) << why;
  EXPECT_EQ(why.rfind("[train] ", 0), 0u) << why;
  EXPECT_THROW(AtomicFileWriter(path("fifo"), "trace"), Error);
  struct stat st{};
  ASSERT_EQ(::stat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_FALSE(fs::exists(path("fifo.tmp-" + std::to_string(::getpid()))));
  // /dev/null is only looked at, never written: the check comes before any temporary is made.
  EXPECT_NE(message_of<Error>([&] { check_output_path("/dev/null", "trace"); }).find("is a device"),
            std::string::npos);
  EXPECT_NE(message_of<Error>([&] { check_output_path("", "trace"); }).find("empty path"), std::string::npos);
}

// Two outputs of one command, or an output and an input, that are one file are refused naming both
// options: by (device, inode) where the file exists, by real directory and name where it does not.
TEST_F(Hostile, OutputsThatAreOneFileWithAnotherPathAreRefused) {
  write("w.npz", "weights");
  fs::create_directory(path("sub"));
  fs::create_symlink(path("w.npz"), path("link.npz"));
  auto why = [&](const std::vector<PathUse>& uses) {
    return message_of<UsageError>([&] { check_distinct_paths(uses, "train", {{"--resume", "--checkpoint"}}); });
  };
  // Two outputs: the same name, or the same new file spelled another way.
  std::string m = why({{"--trace", path("t.json"), true}, {"--json", path("t.json"), true}});
  EXPECT_EQ(m.rfind("[train] --trace and --json name the same file", 0), 0u) << m;
  m = why({{"--trace", path("t.json"), true}, {"--checkpoint", path("sub/../t.json"), true}});
  EXPECT_NE(m.find("--trace and --checkpoint"), std::string::npos) << m;
  // An output onto an input, through a symbolic link too.
  m = why({{"--init-weights", path("w.npz"), false}, {"--json", path("link.npz"), true}});
  EXPECT_NE(m.find("--json would overwrite --init-weights"), std::string::npos) << m;
  EXPECT_NE(m.find("link.npz"), std::string::npos) << m;
  // Allowed: two inputs, a path not given, distinct files, and --checkpoint onto --resume.
  EXPECT_NO_THROW(check_distinct_paths({{"--hw", path("w.npz"), false}, {"--init-weights", path("link.npz"), false},
                                        {"--trace", "", true}, {"--json", "", true}, {"--checkpoint", path("c"), true},
                                        {"--resume", path("c"), false}, {"--dump-batches", path("sub/c"), true}},
                                       "train", {{"--resume", "--checkpoint"}}));
  EXPECT_THROW(check_distinct_paths({{"--resume", path("w.npz"), false}, {"--checkpoint", path("w.npz"), true}}, "train"),
               UsageError);
  m = message_of<UsageError>([&] { check_path_not_empty("--trace", ""); });
  EXPECT_EQ(m, "[cli] --trace is empty — give a file name or leave the option out");
  EXPECT_NO_THROW(check_path_not_empty("--trace", "t.json"));
}

// SIGTERM (or SIGINT) while a file is written removes its temporary — this process's, and a
// child's (a rank saving a checkpoint dies with its run) — then ends the process as it would have.
TEST_F(Hostile, SigtermRemovesTheTemporariesBeingWritten) {
  write("ck", "old");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t run = ::fork();
  if (run == 0) {
    AtomicFileWriter own(path("ck"), "checkpoint");
    own.write("half a checkpoint");
    if (::fork() == 0) {  // the rank, writing its own file
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // as a run's ranks: it dies with the run
      AtomicFileWriter rank(path("rank.json"), "trace");
      rank.write("{");
      (void)!::write(ready[1], "x", 1);
      ::pause();  // until the test ends it
      ::_exit(0);
    }
    char c;
    (void)!::read(ready[0], &c, 1);
    ::raise(SIGTERM);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(run, &status, 0), run);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"ck"});
  EXPECT_EQ(read_regular_file(path("ck"), "checkpoint", 10, ""), "old");
  ::close(ready[0]);
  ::close(ready[1]);
}

// A profile whose numbers are not what they claim is refused with the field named.
TEST(HostileProfile, NumbersMustBeFiniteInRangeAndWholeWhereTheyCount) {
  const std::string good = R"({"name": "p", "nodes": 1, "devices_per_node": 2,
    "device": {"peak_flops": {"f32": 1e12}, "gemm_efficiency": 0.5, "mem_bandwidth_Bps": 1e11,
               "mem_capacity_bytes": 1e9, "launch_overhead_s": 1e-6},
    "links": {"host": {"bandwidth_Bps": 1e10, "latency_s": 1e-6}, "intra_node": {"bandwidth_Bps": 1e11, "latency_s": 1e-6}}})";
  EXPECT_EQ(parse_profile(good, "p.json").device_count(), 2);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return message_of<Error>([&] { parse_profile(t, "p.json"); });
  };
  EXPECT_NE(with(R"("nodes": 1)", R"("nodes": 1.5)").find("'nodes' must be a whole number"), std::string::npos);
  EXPECT_NE(with(R"("devices_per_node": 2)", R"("devices_per_node": 1e12)").find("devices_per_node"), std::string::npos);
  EXPECT_NE(with(R"("name": "p")", R"("name": 7)").find("'name' must be a string"), std::string::npos);
  EXPECT_NE(with(R"("gemm_efficiency": 0.5)", R"("gemm_efficiency": 2)").find("gemm_efficiency"), std::string::npos);
  EXPECT_NE(with(R"("launch_overhead_s": 1e-6)", R"("launch_overhead_s": 1e9)").find("launch_overhead_s"), std::string::npos);
  EXPECT_NE(with(R"("mem_capacity_bytes": 1e9)", R"("mem_capacity_bytes": 1e999)").find("[hw] p.json"), std::string::npos);
  EXPECT_NE(with(R"("nodes": 1)", R"("nodes": 1, "x": [)").find("not valid JSON"), std::string::npos);
}

// An IDX header that claims more than its file holds is refused before the allocation.
TEST_F(Hostile, IdxHeaderClaimingMoreThanTheFileIsRefusedBeforeAllocating) {
  std::string header = {0, 0, 8, 3, 0x0f, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0};  // 2^28 images of 1024×256
  write("images", header + std::string(100, '\0'));
  const std::string what = message_of<Error>([&] { read_idx_images(path("images"), nullptr, nullptr, nullptr); });
  EXPECT_NE(what.find("more than the file can hold"), std::string::npos) << what;
  std::string labels = {0, 0, 8, 1, 0x0f, 0, 0, 0};
  write("labels", labels);
  EXPECT_NE(message_of<Error>([&] { read_idx_labels(path("labels"), nullptr); }).find("more than the file can hold"),
            std::string::npos);
}

// A gzip file inflates to no more than the cap, nor past what its trailer promises (a gzip bomb
// is refused, not inflated): the trailer's promise is checked before inflating.
TEST_F(Hostile, GzipInflatesNoFurtherThanItsCapOrItsTrailer) {
  {
    AtomicFileWriter w(path("zeros.gz"), "test", true);
    w.write(std::string(1 << 20, '\0'));
    w.commit();
  }
  EXPECT_EQ(read_maybe_gzipped(path("zeros.gz"), "test").size(), size_t{1} << 20);
  std::string what = message_of<Error>([&] { read_maybe_gzipped(path("zeros.gz"), "test", 1000, "a test's cap"); });
  EXPECT_NE(what.find("trailer says it inflates to 1.00 MiB, more than the 1000 B"), std::string::npos) << what;
  EXPECT_NE(what.find("a test's cap"), std::string::npos) << what;
  // The trailer made to promise 100 bytes: inflating stops there.
  std::string bytes;
  {
    std::ifstream in(path("zeros.gz"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes.replace(bytes.size() - 4, 4, std::string{100, 0, 0, 0});
  write("liar.gz", bytes);
  what = message_of<Error>([&] { read_maybe_gzipped(path("liar.gz"), "test"); });
  EXPECT_NE(what.find("inflates past the 100 B its gzip trailer promises"), std::string::npos) << what;
}

TEST(HostileTrain, DivergenceStopsTheRunNamingTheStepAndTheOptimizer) {
  TrainConfig c = scalelab::test::small_config("single", 1);
  c.optimizer.lr = 1e30f;
  c.steps = 20;
  EventBus bus;
  const std::string what = message_of<Error>([&] { train(c, bus); });
  EXPECT_EQ(what.rfind("[train] step ", 0), 0u) << what;
  EXPECT_NE(what.find("diverged"), std::string::npos) << what;
  EXPECT_NE(what.find("--lr 1e+30"), std::string::npos) << what;
  EXPECT_NE(what.find("--allow-divergence"), std::string::npos) << what;

  c.allow_divergence = true;
  EventBus bus2;
  const TrainResult r = train(c, bus2);
  EXPECT_FALSE(std::isfinite(r.final_loss));
  const std::string summary = format_summary(r);
  EXPECT_NE(summary.find("diverged"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("dry run"), std::string::npos) << summary;
}

TEST(HostileTrain, OptimizerNumbersThatCannotTrainAreRefusedUpFront) {
  for (float bad : {std::nanf(""), INFINITY, -1.0f}) {
    TrainConfig c = scalelab::test::small_config("single", 1);
    c.optimizer.lr = bad;
    EXPECT_NE(message_of([&] { c.validate(); }).find("[optim] --lr"), std::string::npos);
    c = scalelab::test::small_config("single", 1);
    c.optimizer.momentum = bad;
    EXPECT_NE(message_of([&] { c.validate(); }).find("[optim] --momentum"), std::string::npos);
    c = scalelab::test::small_config("single", 1);
    c.optimizer.weight_decay = bad == -1.0f ? -1.0f : bad;
    EXPECT_NE(message_of([&] { c.validate(); }).find("[optim] --weight-decay"), std::string::npos);
  }
}

TEST(HostileTrain, ContradictoryOrIgnoredSettingsAreRefused) {
  TrainConfig c = scalelab::test::small_config("single", 1, DeviceKind::sim);
  c.dry_run = true;
  c.check_equivalence = true;
  EXPECT_NE(message_of([&] { c.validate(); }).find("--dry-run"), std::string::npos);
  c = scalelab::test::small_config("single", 1);
  c.data_dir = "/tmp";
  EXPECT_NE(message_of([&] { c.validate(); }).find("[data] --data-dir"), std::string::npos);
}

TEST(HostileTrain, AModelLargerThanTheHostIsRefusedWithTheFigure) {
  TrainConfig c = scalelab::test::small_config("single", 1);
  c.model = "mlp:784-999999999-999999999-10";
  const std::string what = message_of([&] { check_host_memory(c); });
  EXPECT_EQ(what.rfind("[memory] --model", 0), 0u) << what;
  EXPECT_NE(what.find("GB of host memory"), std::string::npos) << what;
  EXPECT_NE(what.find("--dry-run"), std::string::npos) << what;
  c.model = "mlp:32-16-8";
  EXPECT_NO_THROW(check_host_memory(c));
  // The weights, gradients and momentum of a 784-256-128-10 MLP and batch 128's activations, plus
  // the synthetic set: all in floats.
  c.model = "mlp:784-256-128-10";
  c.batch = 128;
  const double params = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;
  const double data = (8192.0 + 128) * 784;
  EXPECT_DOUBLE_EQ(static_cast<double>(host_bytes_needed(c)), 4 * (data + 3 * params + 2 * 128 * (784 + 256 + 128 + 10)));
}

// A checkpoint altered and re-summed (its CRC right) with a number no run could have written: an
// fp16 loss scale of NaN, inf, 0 or below skipped every step, exit 0. Resuming refuses it by name.
TEST_F(Hostile, ResumingANumberNoRunWritesIsRefused) {
  TrainConfig c = scalelab::test::small_config("single", 1, DeviceKind::cpu, "adam");
  c.amp = Amp::fp16;
  c.steps = 2;
  c.checkpoint_path = path("good.ckpt");
  EventBus bus;
  train(c, bus);
  const Checkpoint good = load_checkpoint(c.checkpoint_path);
  ASSERT_GT(good.state.loss_scale, 0);
  auto resume_from = [&](const std::function<void(Checkpoint&)>& alter) {
    Checkpoint bad = good;
    alter(bad);
    const std::string file = path("bad.ckpt");
    std::ofstream(file, std::ios::binary) << encode_checkpoint(bad);  // a valid CRC
    TrainConfig again = c;
    again.checkpoint_path.clear();
    again.resume_path = file;
    again.steps = 4;
    EventBus b;
    return message_of<Error>([&] { train(again, b); });
  };
  for (double scale : {std::nan(""), double{INFINITY}, 0.0, -65536.0, 1e39, 1e-40}) {
    const std::string m = resume_from([&](Checkpoint& k) { k.state.loss_scale = scale; });
    EXPECT_EQ(m.rfind("[checkpoint] " + path("bad.ckpt") + ": the fp16 loss scale is ", 0), 0u) << m;
    EXPECT_NE(m.find("use an earlier checkpoint"), std::string::npos) << m;
  }
  for (int64_t good_steps : {int64_t{-1}, int64_t{2000}}) {
    const std::string m = resume_from([&](Checkpoint& k) { k.state.scaler_good_steps = good_steps; });
    EXPECT_NE(m.find("good steps in a row are " + std::to_string(good_steps)), std::string::npos) << m;
  }
  EXPECT_NE(resume_from([](Checkpoint& k) { k.header.step = -5; }).find(": step -5: a count of steps done cannot be negative"),
            std::string::npos);
  EXPECT_NE(resume_from([](Checkpoint& k) { k.state.optimizer_steps = -1; }).find("the optimizer's step count is -1"),
            std::string::npos);
  EXPECT_NE(resume_from([](Checkpoint& k) { k.state.weights.values[2][3] = NAN; }).find("fc2.weight holds nan at index 3"),
            std::string::npos);
  EXPECT_NE(resume_from([](Checkpoint& k) { k.state.optimizer[0][1][0] = -1; }).find("Adam's exp_avg_sq of fc1.weight holds -1"),
            std::string::npos);
  EXPECT_NE(resume_from([](Checkpoint& k) { k.header.amp = "off"; }).find("with --amp off, which has no loss scaler"),
            std::string::npos);
  // The unaltered file resumes.
  EXPECT_EQ(resume_from([](Checkpoint&) {}), "no error");
}

}  // namespace
