// kinfer chat: interactive conversation in the terminal (the loop is cli/lib/chat_repl.h).
// This file adds the line editor: libedit (history, cursor keys, Ctrl-C handling) when the build
// found it and both stdin and stdout are terminals, otherwise plain line reads.
#include "cli/command.h"
#include "cli/lib/cache_flags.h"
#include "cli/lib/chat_repl.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/habits.h"
#include "cli/lib/prompt_text.h"
#include "cli/lib/split_session.h"
#include "common/error.h"

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#ifdef KINFER_HAVE_LIBEDIT
#include <histedit.h>
#endif

namespace kinfer::cli {

namespace {

#ifdef KINFER_HAVE_LIBEDIT
// libedit's native API. While a line is edited the terminal's ISIG is off, so Ctrl-C arrives as
// a key: on an empty line it ends the chat, otherwise it drops the line (as shells do).
class EditlineReader : public LineReader {
public:
    EditlineReader() {
        el_ = el_init("kinfer", stdin, stdout, stderr);
        hist_ = history_init();
        HistEvent ev;
        history(hist_, &ev, H_SETSIZE, 1000);
        history(hist_, &ev, H_SETUNIQUE, 1);
        el_set(el_, EL_CLIENTDATA, this);
        el_set(el_, EL_EDITOR, "emacs");
        el_set(el_, EL_HIST, history, hist_);
        el_set(el_, EL_PROMPT, &EditlineReader::prompt_of);
        el_set(el_, EL_SETTY, "-d", "-isig", nullptr);
        el_set(el_, EL_ADDFN, "kinfer-ctrl-c", "end the chat on an empty line, else drop the line", &EditlineReader::on_ctrl_c);
        el_set(el_, EL_BIND, "^C", "kinfer-ctrl-c", nullptr);
    }
    ~EditlineReader() override {
        history_end(hist_);
        el_end(el_);
    }
    EditlineReader(const EditlineReader&) = delete;
    EditlineReader& operator=(const EditlineReader&) = delete;

    std::optional<std::string> read_line(const std::string& prompt) override {
        prompt_ = prompt;
        for (;;) {
            ctrl_c_ = drop_ = false;
            int n = 0;
            const char* s = el_gets(el_, &n);
            if (ctrl_c_) {
                std::fputs("\n", stdout);
                return std::nullopt;
            }
            if (!s || n <= 0) {   // Ctrl-D on an empty line, or the terminal went away
                std::fputs("\n", stdout);
                return std::nullopt;
            }
            if (drop_) {   // the dropped line stays on screen, marked ^C; a fresh prompt below it
                std::fputs("\n", stdout);
                continue;
            }
            std::string line(s, size_t(n));
            while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
            return line;
        }
    }

    void add_history(const std::string& line) override {
        HistEvent ev;
        history(hist_, &ev, H_ENTER, line.c_str());
    }

private:
    static EditlineReader* self(EditLine* el) {
        void* p = nullptr;
        el_get(el, EL_CLIENTDATA, &p);
        return static_cast<EditlineReader*>(p);
    }
    static char* prompt_of(EditLine* el) { return self(el)->prompt_.data(); }
    static unsigned char on_ctrl_c(EditLine* el, int) {
        const LineInfo* li = el_line(el);
        EditlineReader* me = self(el);
        if (li->lastchar == li->buffer) {
            me->ctrl_c_ = true;
            return CC_EOF;
        }
        me->drop_ = true;
        std::fputs("^C", stdout);
        return CC_NEWLINE;
    }

    EditLine* el_ = nullptr;
    History* hist_ = nullptr;
    std::string prompt_;
    bool ctrl_c_ = false, drop_ = false;
};
#endif

std::unique_ptr<LineReader> make_reader(bool interactive) {
#ifdef KINFER_HAVE_LIBEDIT
    if (interactive) return std::make_unique<EditlineReader>();
#else
    if (interactive) std::fprintf(stderr, "(kinfer was built without libedit: no line editing or history)\n");
#endif
    return make_plain_reader();
}

struct ChatImageArgs {
    std::string mmproj;
    std::vector<std::string> images;
    std::string rules = "llama.cpp";
};

int run_chat(GenArgs& args, int64_t snapshot_every, const ChatImageArgs& vision, bool dash) {
    if (dash) fail("chat reads its messages from the terminal (or a pipe); '-' is for kinfer run");
    if (!vision.images.empty() && vision.mmproj.empty()) usage_fail("--image needs the vision projector: pass --mmproj FILE");
    std::setlocale(LC_CTYPE, "");   // libedit decodes UTF-8 keystrokes by the locale
    if (args.escape) process_escapes(args.system_prompt);
    check_utf8(args.system_prompt, "the system prompt");
    const std::string path = resolve_model_path(args.model);
    resolve_seed(args);
    auto model = model::Model::load(path);
    lock_memory_if_asked();
    take_model_sampling(args, model->file());
    auto tok = text::Tokenizer::from_gguf(model->file());

    ChatConfig cfg;
    cfg.format = pick_chat_format(args, *tok);
    cfg.opts = chat_options(args);
    const bool interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    cfg.color = interactive && std::getenv("NO_COLOR") == nullptr;
    cfg.args = args;
    cfg.snapshot_every = snapshot_every;
    cfg.mmproj = vision.mmproj;
    cfg.images = vision.images;
    cfg.moonshot_rules = vision.rules == "moonshot";

    model::SessionOptions so;
    so.n_ctx = args.n_ctx;
    so.n_batch = args.n_batch;
    so.n_threads = args.n_threads;
    so.cache_type = cache_type_of(args.cache_type);
    auto devices = attach_experts(*model, args.experts, so);
    auto split = attach_split(*model, so);
    model::Session session(*model, so);
    if (!habits().log_disable)
        std::fprintf(stderr, "kinfer chat: %s (%s), format %s, context %lld, seed %lld. /help for commands, Ctrl-D to quit.\n",
                     model->describe().c_str(), path.c_str(), text::chat_format_name(cfg.format), (long long)args.n_ctx,
                     (long long)args.sampling.seed);
    ChatRepl repl(session, *tok, std::move(cfg));   // encodes --image now
    // SIGINT stays caught for the whole chat: at the prompt the plain reader polls for it; while
    // a reply is generated it stops the reply.
    InterruptScope guard;
    auto reader = make_reader(interactive);
    const int rc = repl.run(*reader);
    devices->finish();   // --verbose-experts report, profile counts
    return rc;
}

std::function<int()> setup_chat(CLI::App& app) {
    auto a = std::make_shared<GenArgs>();
    a->n_predict = -1;   // a reply ends at end of generation (or Ctrl-C), not after a token count
    add_generation_flags(app, *a);
    add_split_flags(app);
    auto every = std::make_shared<int64_t>(-1);
    app.add_option("--state-snapshot-every", *every,
                   "keep a copy of the KDA + conv state every N tokens, so /regen and other edits re-read only "
                   "what follows the nearest copy (0: none; default: by memory, so the copies take about as much "
                   "as the latent cache)")
        ->check(int_in(0, kMaxCtx));
    auto vision = std::make_shared<ChatImageArgs>();
    app.add_option("--mmproj", vision->mmproj, "vision projector GGUF (llama.cpp's mmproj): lets /image and --image attach images");
    app.add_option("--image", vision->images,
                   "image file for the first message (repeatable, in order): at its <__media__> markers, else before its text");
    app.add_option("--image-rules", vision->rules,
                   "llama.cpp (default) or moonshot: how images are preprocessed and wrapped, as for kinfer run (docs/vision.md)")
        ->check(CLI::IsMember({"llama.cpp", "moonshot"}));
    return [a, every, vision, &app] { return run_chat(*a, *every, *vision, take_extras(app, *a)); };
}

}  // namespace

KINFER_COMMAND("chat", "Interactive terminal chat with a model", setup_chat);

}  // namespace kinfer::cli
