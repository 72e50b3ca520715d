// Poller placement that does not collide (core/placement.h): CPU claims in a directory, on a
// fabricated list of candidate cores, so the answers do not depend on this machine. Holders in
// other processes are forked children; "killed" means SIGKILL and then waited for (or left a
// zombie: waitid(WNOWAIT)), never a sleep.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/placement.h"
#include "core/process.h"
#include "gtest/gtest.h"

namespace pollux::core {
namespace {

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = absl::StrFormat("%s/placement-%d-%s", ::testing::TempDir(), getpid(),
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0) << dir;
  }
  void TearDown() override {
    for (int cpu : claimed_cpus(dir)) ::unlink(claim_path(dir, cpu).c_str());
    ::unlink((dir + "/link").c_str());
    ::rmdir(dir.c_str());
  }
  PlacementRequest req(std::uint32_t pollers, std::string name, std::vector<int> candidates = {7, 6, 5}) const {
    PlacementRequest r;
    r.claims_dir = dir;
    r.candidates = std::move(candidates);
    r.pollers = pollers;
    r.owner_name = std::move(name);
    return r;
  }
  // A child process that claims `cpu` and waits (until killed); returns its pid once it holds it.
  pid_t holder_child(int cpu) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    const pid_t child = fork();
    if (child == 0) {
      auto c = CpuClaim::acquire(dir, cpu, "child");
      const char ok = c.ok() ? 'y' : 'n';
      (void)!write(p[1], &ok, 1);
      for (;;) pause();
    }
    close(p[1]);
    char ok = 0;
    EXPECT_EQ(read(p[0], &ok, 1), 1);
    close(p[0]);
    EXPECT_EQ(ok, 'y');
    return child;
  }
  std::string dir;
};

TEST_F(PlacementTest, ContextsGetDifferentCoresWhileEnoughExist) {
  Placement a = place_pollers(req(1, "alpha"));
  Placement b = place_pollers(req(1, "beta"));
  Placement c = place_pollers(req(1, "gamma"));
  EXPECT_EQ(a.cpus, std::vector<int>{7}) << "highest preference first";
  EXPECT_EQ(b.cpus, std::vector<int>{6});
  EXPECT_EQ(c.cpus, std::vector<int>{5});
  EXPECT_TRUE(a.warnings.empty() && b.warnings.empty() && c.warnings.empty());
  EXPECT_TRUE(claim_held(dir, 7));
  const ClaimHolder h = read_claim(dir, 6);
  ASSERT_TRUE(h.known);
  EXPECT_EQ(h.pid, getpid());
  EXPECT_EQ(h.name, "beta");
  EXPECT_EQ(h.start, self_start_time());
  // Released on destruction (the file goes too); the next placement takes the core again.
  a = Placement();
  EXPECT_FALSE(claim_held(dir, 7));
  EXPECT_NE(::access(claim_path(dir, 7).c_str(), F_OK), 0) << "a clean release removes its file";
  EXPECT_EQ(place_pollers(req(1, "delta")).cpus, std::vector<int>{7});
}

TEST_F(PlacementTest, OneContextsPollersNeverShareACore) {
  Placement a = place_pollers(req(3, "multi"));
  EXPECT_EQ(a.cpus, (std::vector<int>{7, 6, 5}));
  EXPECT_EQ(a.claims.size(), 3u);
}

TEST_F(PlacementTest, AllClaimedFallsBackToUnpinnedAndNamesTheHolders) {
  Placement a = place_pollers(req(2, "first", {7, 6}));
  ASSERT_EQ(a.cpus, (std::vector<int>{7, 6}));
  Placement b = place_pollers(req(1, "second", {7, 6}));
  ASSERT_EQ(b.cpus, std::vector<int>{-1});
  ASSERT_EQ(b.warnings.size(), 1u);
  const std::string& w = b.warnings[0];
  EXPECT_NE(w.find("poller 0 runs unpinned"), std::string::npos) << w;
  EXPECT_NE(w.find(absl::StrFormat("cpu 7 (pid %d, first)", getpid())), std::string::npos) << w;
  EXPECT_NE(w.find(absl::StrFormat("cpu 6 (pid %d, first)", getpid())), std::string::npos) << w;
  EXPECT_NE(w.find("runtime.poller_cores"), std::string::npos) << "says what to do: " << w;
  // More pollers than free cores in one context: the extra ones are unpinned, named as such.
  a = Placement();
  Placement c = place_pollers(req(3, "wide", {7, 6}));
  EXPECT_EQ(c.cpus, (std::vector<int>{7, 6, -1}));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("poller 2 runs unpinned"), std::string::npos) << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("cpu 7, cpu 6 by this context"), std::string::npos) << c.warnings[0];
}

TEST_F(PlacementTest, AKilledHoldersClaimIsTakenOver) {
  const pid_t child = holder_child(7);
  EXPECT_TRUE(claim_held(dir, 7));
  EXPECT_EQ(read_claim(dir, 7).pid, child);
  EXPECT_EQ(place_pollers(req(1, "me")).cpus, std::vector<int>{6}) << "7 is held by the child";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  // The child never removed its file: it names a dead process and nobody holds it.
  EXPECT_EQ(::access(claim_path(dir, 7).c_str(), F_OK), 0);
  EXPECT_FALSE(claim_held(dir, 7));
  Placement p = place_pollers(req(1, "taker"));
  EXPECT_EQ(p.cpus, std::vector<int>{7});
  EXPECT_EQ(read_claim(dir, 7).pid, getpid()) << "the content now names the new holder";
  EXPECT_EQ(read_claim(dir, 7).name, "taker");
}

// The holder was killed, its parent has not reaped it yet (a zombie): the kernel has
// already dropped its locks, so the core is free.
TEST_F(PlacementTest, AZombieHoldsNothing) {
  const pid_t child = holder_child(7);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);  // dead, not reaped
  EXPECT_FALSE(process_alive(child)) << "a zombie is not alive";
  EXPECT_TRUE(::kill(child, 0) == 0) << "(while kill(pid, 0) still answers for it)";
  EXPECT_EQ(place_pollers(req(1, "taker")).cpus, std::vector<int>{7});
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

TEST_F(PlacementTest, ExplicitCoresAreNeverOverriddenButCollisionsAreWarned) {
  Placement a = place_pollers(req(1, "auto"));
  ASSERT_EQ(a.cpus, std::vector<int>{7});
  PlacementRequest r = req(2, "fixed");
  r.explicit_cores = {7, 3};
  Placement b = place_pollers(r);
  EXPECT_EQ(b.cpus, (std::vector<int>{7, 3})) << "as configured";
  ASSERT_EQ(b.warnings.size(), 1u);
  EXPECT_NE(b.warnings[0].find("poller 0: runtime.poller_cores puts it on cpu 7"), std::string::npos) << b.warnings[0];
  EXPECT_NE(b.warnings[0].find(absl::StrFormat("cpu 7 (pid %d, auto)", getpid())), std::string::npos) << b.warnings[0];
  EXPECT_TRUE(claim_held(dir, 3)) << "an explicit core is claimed too, so automatic placement avoids it";
  EXPECT_EQ(place_pollers(req(1, "later", {3, 2})).cpus, std::vector<int>{2});
}

TEST_F(PlacementTest, AnUnusableDirectoryPinsAsBeforeAndSaysSo) {
  PlacementRequest r = req(1, "x");
  r.claims_dir = dir + "/missing";
  Placement p = place_pollers(r);
  EXPECT_EQ(p.cpus, std::vector<int>{7});
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("without a claim"), std::string::npos) << p.warnings[0];
  // No topology: unpinned, nothing to warn about.
  EXPECT_EQ(place_pollers(req(1, "y", {})).cpus, std::vector<int>{-1});
}

TEST_F(PlacementTest, LinksAndFifosAreNotClaimFiles) {
  ASSERT_EQ(::symlink("/etc/passwd", claim_path(dir, 7).c_str()), 0);
  ASSERT_EQ(::mkfifo(claim_path(dir, 6).c_str(), 0600), 0);
  auto l = CpuClaim::acquire(dir, 7, "x");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("symbolic link"), absl::string_view::npos) << l.status();
  auto f = CpuClaim::acquire(dir, 6, "x");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not a regular file"), absl::string_view::npos) << f.status();
  EXPECT_FALSE(read_claim(dir, 6).known);
  // Placement goes on to the next candidate.
  EXPECT_EQ(place_pollers(req(1, "z")).cpus, std::vector<int>{5});
}

TEST_F(PlacementTest, HostileContentIsParsedWithBounds) {
  const std::string path = claim_path(dir, 7);
  const std::string junk = "pid 12 start 3 boot 4 name \x1b[31mred" + std::string(500, 'A') + "\n";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fwrite(junk.data(), 1, junk.size(), f);
  std::fclose(f);
  const ClaimHolder h = read_claim(dir, 7);
  ASSERT_TRUE(h.known);
  EXPECT_EQ(h.pid, 12);
  EXPECT_LE(h.name.size(), 63u);
  EXPECT_EQ(h.name.find('\x1b'), std::string::npos);
  // Not held (nobody locks it): claimable.
  EXPECT_EQ(place_pollers(req(1, "ok")).cpus, std::vector<int>{7});
}

TEST_F(PlacementTest, CleanRemovesOnlyUnheldClaims) {
  const pid_t child = holder_child(5);
  Placement mine = place_pollers(req(1, "mine"));  // 7
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::vector<std::string> removed = remove_unheld_claims(dir);
  EXPECT_EQ(removed, std::vector<std::string>{claim_path(dir, 5)});
  EXPECT_TRUE(claim_held(dir, 7));
  EXPECT_EQ(claimed_cpus(dir), std::vector<int>{7});
}

// Claimers and releasers racing on one core (a releaser removes the file while it still holds
// the lock): two holders at once would show as `holders` reaching 2. Run under TSan too.
TEST_F(PlacementTest, RacingClaimsNeverDoubleHold) {
  std::atomic<int> holders{0}, max_holders{0}, acquired{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        auto c = CpuClaim::acquire(dir, 3, "race");
        if (!c.ok()) continue;
        const int now = holders.fetch_add(1) + 1;
        int prev = max_holders.load();
        while (now > prev && !max_holders.compare_exchange_weak(prev, now)) {
        }
        acquired.fetch_add(1);
        holders.fetch_sub(1);
        // c releases here: unlink while locked, then close.
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_GT(acquired.load(), 0);
}

}  // namespace
}  // namespace pollux::core
