// kinfer tokenize: text -> token ids, printed like llama-tokenize.
//   kinfer tokenize -m model.gguf -p "Hello world"            "    39 -> 'H'" lines
//   kinfer tokenize -m model.gguf -f prompt.txt --ids          [39, 301, 385, 1917]
//   kinfer tokenize --tiktoken tiktoken.model --pre kimi-k2 -p "..."   (a raw rank file)
// The text is used verbatim (no escape processing, unlike llama-tokenize's -p); special tokens
// are parsed unless --no-parse-special. No BOS is added unless the vocabulary asks for it.
#include "cli/command.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "gguf/reader.h"
#include "text/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace {

struct Options {
    std::string model;
    std::string tiktoken;
    std::string pre = "kimi-k2";
    std::string file;
    std::string prompt;
    bool prompt_set = false;
    bool use_stdin = false;
    bool ids = false;
    bool pieces = false;
    bool no_parse_special = false;
    bool show_count = false;
    bool no_bos = false;
    bool timing = false;
    bool quiet = false;
};

std::string read_all(std::istream& in) {
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

int run(const Options& o) {
    using namespace kinfer;
    std::unique_ptr<text::Tokenizer> tok;
    if (!o.tiktoken.empty()) {
        auto pre = text::pretokenizer_from_name(o.pre);
        if (!pre) fail("unknown pre-tokenizer '{}' (kimi-k2, o200k, cl100k)", o.pre);
        check_input_file(o.tiktoken, "tokenize: --tiktoken");
        tok = text::Tokenizer::from_tiktoken_file(o.tiktoken, *pre);
    } else {
        if (o.model.empty()) fail("tokenize needs a model: -m model.gguf (or --tiktoken FILE)");
        check_input_file(o.model, "tokenize: model");
        auto file = gguf::File::open(o.model);
        tok = text::Tokenizer::from_gguf(*file);
    }

    std::string text;
    if (o.use_stdin) {
        text = read_all(std::cin);
    } else if (!o.file.empty()) {
        check_input_file(o.file, "tokenize: -f");
        std::ifstream f(o.file, std::ios::binary);
        if (!f) fail("{}: cannot open", o.file);
        text = read_all(f);
    } else if (o.prompt_set) {
        text = o.prompt;
    } else {
        fail("tokenize needs one of -p TEXT, -f FILE or --stdin");
    }

    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const auto ids = tok->encode(text, !o.no_parse_special, o.no_bos ? 0 : -1);
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.timing)   // CPU time too: on a loaded machine the wall clock says little
        std::fprintf(stderr, "tokenize: %zu bytes -> %zu tokens: wall %.3f s (%.1f MB/s), cpu %.3f s (%.1f MB/s)\n",
                     text.size(), ids.size(), secs, secs > 0 ? text.size() / 1e6 / secs : 0.0, cpu,
                     cpu > 0 ? text.size() / 1e6 / cpu : 0.0);
    if (o.quiet) return 0;
    std::string out;
    if (o.ids) {
        out += '[';
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out += ", ";
            out += std::to_string(ids[i]);
        }
        out += "]\n";
    } else {
        char buf[32];
        for (auto id : ids) {
            std::snprintf(buf, sizeof buf, "%6d -> '", id);
            out += buf;
            out += tok->piece(id);
            out += "'\n";
        }
    }
    if (o.show_count) out += "Total number of tokens: " + std::to_string(ids.size()) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<Options>();
    app.add_option("-m,--model", o->model, "GGUF model whose vocabulary to use");
    app.add_option("--tiktoken", o->tiktoken, "Use a tiktoken rank file (base64 token + rank per line) instead");
    app.add_option("--pre", o->pre, "Pre-tokenizer for --tiktoken: kimi-k2, o200k, cl100k")->capture_default_str();
    auto* f = app.add_option("-f,--file", o->file, "Read the text from a file (verbatim)");
    auto* p = app.add_option("-p,--prompt", o->prompt, "The text to tokenize");
    auto* s = app.add_flag("--stdin", o->use_stdin, "Read the text from standard input");
    f->excludes(p)->excludes(s);
    p->excludes(s);
    auto* ids = app.add_flag("--ids", o->ids, "Print only the ids, as a list: [1, 2, 3]");
    app.add_flag("--pieces", o->pieces, "Print 'id -> piece' lines (the default)")->excludes(ids);
    app.add_flag("--no-parse-special", o->no_parse_special, "Treat special-token text as plain text");
    app.add_flag("--show-count", o->show_count, "Print the number of tokens at the end");
    app.add_flag("--no-bos", o->no_bos, "Never add a BOS token");
    app.add_flag("--timing", o->timing, "Print the encoding time and speed to stderr");
    app.add_flag("--quiet", o->quiet, "Print no tokens (with --timing: a benchmark)");
    return [o, p] {
        o->prompt_set = p->count() > 0;
        return run(*o);
    };
}

}  // namespace

KINFER_COMMAND("tokenize", "Tokenize text like llama-tokenize", setup);
