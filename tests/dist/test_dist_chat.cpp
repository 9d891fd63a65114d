// kinfer chat under mpirun in a real terminal (tmux, like tests/cli/test_chat_tmux.cpp): rank 0
// reads the keys and prints the replies; the replies equal those of one process.
#include "dist_util.h"

#include <chrono>
#include <doctest/doctest.h>
#include <thread>
#include <unistd.h>

using namespace kinfer::test;

namespace {

std::string sh_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// One detached tmux session on a server of its own, running `line`.
struct Pane {
    std::string base;
    explicit Pane(const std::string& line, const std::string& name)
        : base("tmux -L kinfer_dist_" + name + "_" + std::to_string(getpid()) + " -f /dev/null") {
        run_command(base + " new-session -d -s t -x 150 -y 50 " + sh_quote(line + "; echo KINFER_EXIT=$?; sleep 60"));
    }
    ~Pane() { run_command(base + " kill-server"); }
    void type_line(const std::string& text) {
        run_command(base + " send-keys -t t -l " + sh_quote(text));
        run_command(base + " send-keys -t t Enter");
    }
    std::string screen() { return run_command(base + " capture-pane -p -t t -S -200").out; }
    // Waits until the screen has not changed for `quiet` seconds (a reply is done), at most
    // `seconds`; returns the last screen.
    std::string settle(double quiet, double seconds) {
        using clock = std::chrono::steady_clock;
        const auto end = clock::now() + std::chrono::duration<double>(seconds);
        std::string last = screen();
        auto since = clock::now();
        while (clock::now() < end) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            const std::string s = screen();
            if (s != last) last = s, since = clock::now();
            else if (std::chrono::duration<double>(clock::now() - since).count() >= quiet) break;
        }
        return last;
    }
};

// The screen lines strictly between the line holding `from` and the next one holding `to`.
std::string between(const std::string& s, const std::string& from, const std::string& to) {
    const size_t a = s.find(from), b = s.find(to, a == std::string::npos ? 0 : a);
    if (a == std::string::npos || b == std::string::npos) return "(missing)";
    const size_t start = s.find('\n', a) + 1, stop = s.rfind('\n', b) + 1;
    return stop > start ? s.substr(start, stop - start) : "";
}

struct Replies {
    std::string first, second;
    bool exited_ok = false;
};

// Two turns and /exit. Under mpirun rank 0's stdin is a pipe from mpirun, so chat reads plain
// lines there (no "> " prompt, no line editing): the replies are compared, not the prompts.
Replies two_turns(const std::string& prefix, const std::string& extra, const std::string& name) {
    // Under LeakSanitizer, libedit's own leak must not fail the exit status (as in tests/cli).
    const std::string supp = std::string(KINFER_SOURCE_DIR) + "/tests/cli/lsan_libedit.supp";
    const std::string line = "LSAN_OPTIONS=suppressions=" + sh_quote(supp) + " " + prefix + sh_quote(kinfer_bin()) + " chat -m " + sh_quote(data("models/kl-tiny-a-Q4_K_M.gguf")) +
                             " -t 1 --temp 0 -n 12 --log-disable " + extra;
    Pane p(line, name);
    p.settle(1.0, 30);
    p.type_line("first question");
    p.settle(1.0, 30);
    p.type_line("second question");
    p.settle(1.0, 30);
    p.type_line("/exit");
    std::string s = p.settle(1.0, 30);
    INFO(s);
    Replies r;
    r.first = between(s, "first question", "second question");
    r.second = between(s, "second question", "/exit");
    r.exited_ok = s.find("KINFER_EXIT=0") != std::string::npos;
    return r;
}

}  // namespace

TEST_CASE("dist: chat under mpirun in tmux: two turns equal one process, then /exit") {
    if (!have_mpirun()) return;
    if (run_command("command -v tmux").rc != 0) {
        skip_case(SkipKind::tool, "tmux not found; the terminal test of chat under mpirun is skipped");
        return;
    }
    const Replies one = two_turns("", "", "one");
    REQUIRE(one.exited_ok);
    REQUIRE(one.first.size() > 1);
    REQUIRE(one.second.size() > 1);
    for (const char* split : {"pipeline", "experts"}) {
        CAPTURE(split);
        const Replies many = two_turns(mpirun(2), std::string("--split ") + split, std::string("many_") + split);
        CHECK(many.exited_ok);
        CHECK(many.first == one.first);
        CHECK(many.second == one.second);
    }
}
