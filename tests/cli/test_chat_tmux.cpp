// kinfer chat in a real terminal: tmux runs it in a detached session of fixed size, the test
// types with send-keys and reads the screen with capture-pane. Two turns, a reply interrupted
// with Ctrl-C, a turn after that, /exit; then Ctrl-C and Ctrl-D at an empty prompt.
#include "cli_util.h"

#include <cctype>
#include <chrono>
#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace kinfer::test;

namespace {

class Tmux {
public:
    // A server of its own per instance: a fresh one on a socket being shut down could fail.
    explicit Tmux(const std::string& command)
        : sock_("kinfer_test_" + std::to_string(getpid()) + "_" + std::to_string(next_id()++)) {
        // The shell line reports the exit status and keeps the pane open so the test can read it.
        const std::string line = command + "; echo KINFER_EXIT=$?; sleep 60";
        ok_ = run_command(base() + " new-session -d -s t -x 150 -y 50 " + quote(line)).rc == 0;
    }
    ~Tmux() { run_command(base() + " kill-server"); }
    bool ok() const { return ok_; }

    void keys(const std::string& k) { run_command(base() + " send-keys -t t " + k); }
    void type(const std::string& text) { run_command(base() + " send-keys -t t -l " + quote(text)); }
    std::string screen() { return run_command(base() + " capture-pane -p -t t -S -200").out; }

    // Polls the screen until pred holds or the time is up; returns the last screen.
    template <class Pred>
    std::string wait_for(Pred pred, double seconds) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        std::string s;
        while (std::chrono::steady_clock::now() < end) {
            s = screen();
            if (pred(s)) return s;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return s;
    }
    std::string wait_for_text(const std::string& t, double seconds) {
        return wait_for([&](const std::string& s) { return s.find(t) != std::string::npos; }, seconds);
    }
    // The chat is idle at its n-th prompt: n lines start with the prompt "> " (tmux trims the
    // idle one to ">"), the last of them at the bottom.
    std::string wait_for_prompt(size_t n, double seconds) {
        return wait_for([&](const std::string& s) { return prompts(s) >= n && last_line(s) == ">"; }, seconds);
    }
    static size_t prompts(const std::string& s) {
        size_t k = 0;
        for (const auto& l : lines_of(s)) k += l == ">" || l.rfind("> ", 0) == 0;
        return k;
    }
    static std::string last_line(const std::string& s) {
        auto lines = lines_of(s);
        return lines.empty() ? "" : lines.back();
    }

private:
    static int& next_id() {
        static int id = 0;
        return id;
    }
    std::string base() const { return "tmux -L " + sock_ + " -f /dev/null"; }
    std::string sock_;
    bool ok_ = false;
};

bool have_tmux() {
    if (run_command("command -v tmux").rc == 0) return true;
    skip_case(SkipKind::tool, "tmux not found; the terminal test of kinfer chat is skipped");
    return false;
}

// `kinfer chat -t 2 --temp 0` as a shell command. Under LeakSanitizer, libedit's own leak (EL_ADDFN
// names) must not fail the exit status.
std::string chat_command() {
    const std::string supp = std::string(KINFER_SOURCE_DIR) + "/tests/cli/lsan_libedit.supp";
    return "LSAN_OPTIONS=suppressions=" + quote(supp) + " " + quote(kinfer_bin()) + " chat -t 2 --temp 0";
}

std::string chat_line(const std::string& extra) {
    return chat_command() + " -m " + quote(tiny_model("kl-tiny-a-Q4_K_M")) + " " + extra;
}

}  // namespace

TEST_CASE("chat in tmux: two turns, Ctrl-C stops a reply, the chat goes on, /exit") {
    if (!have_tmux()) return;
    // 100 ms per token: a full reply of 12 tokens takes over a second, time enough to interrupt
    // the second one while it streams.
    Tmux t(chat_line("-n 12 --debug-token-delay 100"));
    REQUIRE(t.ok());
    const double slow = sanitized() ? 60 : 20;
    std::string s = t.wait_for_prompt(1, slow);
    REQUIRE_MESSAGE(s.find("kinfer chat:") != std::string::npos, s);

    t.type("first question");
    t.keys("Enter");
    s = t.wait_for_prompt(2, slow);
    INFO(s);
    REQUIRE(s.find("> first question") != std::string::npos);
    CHECK(s.find("[interrupted]") == std::string::npos);

    t.type("second question");
    t.keys("Enter");
    // Interrupt once the reply has started streaming (the line below the question has text).
    t.wait_for([](const std::string& x) {
        const size_t q = x.find("> second question\n");
        return q != std::string::npos && x.find_first_not_of(" \n", q + 18) != std::string::npos;
    }, slow);
    t.keys("C-c");
    s = t.wait_for_text("[interrupted]", slow);
    CHECK(s.find("[interrupted]") != std::string::npos);
    s = t.wait_for_prompt(3, slow);
    CHECK(Tmux::last_line(s) == ">");

    t.type("third question");
    t.keys("Enter");
    s = t.wait_for_prompt(4, slow);
    CHECK(s.find("> third question") != std::string::npos);
    t.type("/stats");
    t.keys("Enter");
    s = t.wait_for_text("3 turns", slow);
    CHECK(s.find("| 3 turns |") != std::string::npos);

    t.type("/exit");
    t.keys("Enter");
    s = t.wait_for_text("KINFER_EXIT=", slow);
    CHECK(s.find("KINFER_EXIT=0") != std::string::npos);
    CHECK(s.find("kinfer: error") == std::string::npos);
}

TEST_CASE("chat in tmux: Ctrl-C or Ctrl-D at an empty prompt exits cleanly") {
    if (!have_tmux()) return;
    const double slow = sanitized() ? 60 : 20;
    for (const char* key : {"C-c", "C-d"}) {
        CAPTURE(key);
        Tmux t(chat_line("-n 4"));
        REQUIRE(t.ok());
        std::string s = t.wait_for_prompt(1, slow);
        // Ctrl-C on a non-empty line only drops that line.
        t.type("never sent");
        t.keys("C-c");
        s = t.wait_for_prompt(2, slow);
        CHECK(s.find("KINFER_EXIT") == std::string::npos);
        t.keys(key);
        s = t.wait_for_text("KINFER_EXIT=", slow);
        CHECK(s.find("KINFER_EXIT=0") != std::string::npos);
        CHECK(s.find("never sent") != std::string::npos);   // echoed, then dropped: no reply to it
    }
}

// The README's first path: `kinfer chat` with no -m talks to the shipped demo model. An in-domain
// question gets a reply in words that ends its turn (the model's end of message, not -n or the
// context) and has the form the fine-tune taught (a definition, a verse under a reference), and a
// second turn works. Which word it defines is not checked: at 17 M parameters the demo model mostly
// invents the headword (models/README.md, Chat).
TEST_CASE("chat in tmux: the demo model answers in-domain questions and ends its turns") {
    if (!have_tmux()) return;
    const std::string model = std::string(KINFER_SOURCE_DIR) + "/models/kinfer-demo.gguf";
    REQUIRE_MESSAGE(std::filesystem::exists(model), "models/kinfer-demo.gguf is missing");
    // No -m: the default model lookup finds the source tree's demo model. Greedy, so the replies
    // are the model's most likely ones.
    Tmux t("cd " + quote(KINFER_SOURCE_DIR) + " && " + chat_command());
    REQUIRE(t.ok());
    const double slow = sanitized() ? 120 : 30;
    std::string s = t.wait_for_prompt(1, slow);
    REQUIRE_MESSAGE(s.find("kinfer-demo.gguf") != std::string::npos, s);
    struct Turn {
        const char* question;
        const char* starts;   // the reply's first words
        const char* then;     // and later in it
    };
    const Turn turns[] = {{"What is a cynic?", "In The Devil's Dictionary, ", "): "},
                          {"What does John 3:16 say?", "In the King James Bible, ", " reads: "}};
    size_t n = 1;
    for (const Turn& turn : turns) {
        const std::string question = turn.question;
        CAPTURE(question);
        t.type(question);
        t.keys("Enter");
        s = t.wait_for_prompt(++n, slow);
        const std::string asked = std::string("> ") + turn.question + "\n";
        const size_t q = s.find(asked);
        REQUIRE_MESSAGE(q != std::string::npos, s);
        std::string reply = s.substr(q + asked.size());
        reply = reply.substr(0, reply.rfind("\n>"));
        INFO("reply: " << reply);
        size_t letters = 0, spaces = 0;
        for (unsigned char c : reply) letters += std::isalpha(c) != 0, spaces += c == ' ';
        CHECK(spaces >= 4);
        CHECK(double(letters + spaces) >= 0.75 * double(reply.size()));
        CHECK(reply.rfind(turn.starts, 0) == 0);
        CHECK(reply.find(turn.then) != std::string::npos);
        CHECK(reply.find("[context") == std::string::npos);
        t.type("/stats");
        t.keys("Enter");
        s = t.wait_for_text("[last reply:", slow);
        const size_t st = s.rfind("[last reply:");
        REQUIRE(st != std::string::npos);
        const std::string stats = s.substr(st, s.find(']', st) - st);
        INFO(stats);
        CHECK((stats.find("stop: eog") != std::string::npos || stats.find("stop: stop_string") != std::string::npos));
        t.wait_for_prompt(++n, slow);   // the prompt after /stats
    }
    t.type("/exit");
    t.keys("Enter");
    s = t.wait_for_text("KINFER_EXIT=", slow);
    CHECK(s.find("KINFER_EXIT=0") != std::string::npos);
}
