#include "cli/lib/habits.h"

#include "common/error.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>

namespace kinfer::cli {

Habits& habits() {
    static Habits h;
    return h;
}

namespace {

struct Rename {
    const char* from;
    const char* to;
};
// Same meaning, kinfer's spelling.
const Rename kRenames[] = {
    {"-ngl", "--n-gpu-layers"}, {"--gpu-layers", "--n-gpu-layers"}, {"-ot", "--ot"}, {"-dev", "--device"},
    {"-s", "--seed"},           {"-sys", "--system-prompt"},        {"-cmoe", "--cpu-moe"}, {"-ncmoe", "--n-cpu-moe"},
    {"-ctk", "--cache-type-k"}, {"-sm", "--split-mode"},
};

struct Accept {
    const char* flag;
    const char* note;   // nullptr: silent (kinfer already behaves so)
    int values;         // how many following arguments belong to it (0, or 1 when one is present)
};
const Accept kAccepted[] = {
    {"-fa", "-fa: kinfer's attention is always computed in one fused pass; nothing to switch", 0},
    {"--flash-attn", "--flash-attn: kinfer's attention is always computed in one fused pass; nothing to switch", 0},
    {"--no-mmap", "--no-mmap: kinfer always maps the model read-only (expert reads: --expert-io pread|direct)", 0},
    {"--no-display-prompt", nullptr, 0},   // kinfer never echoes the prompt
    {"--no-warmup", nullptr, 0},
    {"-e", nullptr, 0},                    // escapes are processed by default (--no-escape turns that off)
    {"-no-cnv", nullptr, 0},
    {"--no-conversation", nullptr, 0},
    {"-st", nullptr, 0},
    {"--single-turn", nullptr, 0},
    {"--color", nullptr, 0},               // colour on a terminal is the default; NO_COLOR turns it off
    {"-co", nullptr, 0},
    {"-mli", "-mli: in kinfer chat a line ending in \\ continues on the next line", 0},
    {"--multiline-input", "--multiline-input: in kinfer chat a line ending in \\ continues on the next line", 0},
};

struct Instead {
    const char* flags;   // space-separated spellings
    const char* what;
    bool takes_value;
};
const Instead kInstead[] = {
    {"-ctv --cache-type-v", "MLA keeps one latent cache for keys and values: -ctk sets its type (the KDA state stays fp32)", true},
    {"-np --parallel", "kinfer runs one sequence per process", true},
    {"-cb --cont-batching -nocb --no-cont-batching", "kinfer runs one sequence per process", false},
    {"--rope-freq-base --rope-freq-scale --rope-scaling --rope-scale --yarn-orig-ctx --yarn-ext-factor",
     "Kimi K3 and Kimi Linear use no rotary embedding (NoPE MLA, KDA); -c sets the context", true},
    {"-md --model-draft -cd --ctx-size-draft --draft-max --draft-min -ngld --gpu-layers-draft",
     "kinfer has no speculative decoding", true},
    {"--lora --lora-scaled", "kinfer loads no LoRA adapters: merge them into the checkpoint, then kinfer convert", true},
    {"-hf --hf-repo -hff --hf-file -mu --model-url", "kinfer downloads nothing: fetch the GGUF file and pass -m FILE", true},
    {"-ts --tensor-split -mg --main-gpu",
     "kinfer shares the -ngl layers evenly among the --device list (--split-mode layer|experts says how); "
     "--ot, --cpu-moe and --n-cpu-moe place experts", true},
    {"-tb --threads-batch", "-t sets the threads for both prefill and generation", true},
    {"-ub --ubatch-size", "-b is kinfer's one prefill chunk size", true},
    {"--mirostat --mirostat-lr --mirostat-ent --typical --dynatemp-range --dynatemp-exp --xtc-probability "
     "--xtc-threshold --dry-multiplier --dry-base --dry-allowed-length --top-nsigma",
     "kinfer samples with --temp, --top-k, --top-p, --min-p and the repeat / presence / frequency penalties", true},
    {"--grammar --grammar-file -j --json-schema", "kinfer has no constrained (grammar) sampling", true},
    {"-ins --instruct", "use kinfer chat (interactive) or kinfer run --chat (one reply)", false},
    {"--in-prefix --in-suffix --in-prefix-bos", "kinfer chat wraps each message in the model's chat format", true},
    {"--jinja --chat-template-file", "--chat-template kimi-k2|kimi-k3 picks the chat format", false},
    {"--keep", "kinfer does not shift the context: chat stops when it is full (/clear starts over)", true},
    {"--numa", "kinfer does not place memory by NUMA node: run it under numactl", true},
    {"-dt --defrag-thold -nkvo --no-kv-offload", "kinfer's caches are flat arrays with nothing to defragment or offload", false},
    {"--prompt-cache-all --prompt-cache-ro", "kinfer run --prompt-cache FILE saves the prompt's state after it is read and reuses it", true},
    {"-cml --chatml", "--chat-template kimi-k2|kimi-k3 picks the chat format", false},
};

bool in_list(const char* list, const std::string& a) {
    const size_t n = a.size();
    for (const char* p = list; *p;) {
        const char* e = std::strchr(p, ' ');
        const size_t len = e ? size_t(e - p) : std::strlen(p);
        if (len == n && std::strncmp(p, a.c_str(), n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

// Options whose value is free text: the word after them is never rewritten (a prompt may start
// with a dash).
bool takes_text(const std::string& a) {
    static const char* const kText[] = {"-p", "--prompt", "-sys", "--system-prompt", "-r", "--reverse-prompt",
                                        "-f", "--file", "-m", "--model", "-o", "--outfile", "--chat-template"};
    for (const char* t : kText)
        if (a == t) return true;
    return false;
}

bool one_dash_word(const std::string& a) {
    if (a.size() < 3 || a[0] != '-' || a[1] == '-') return false;
    for (size_t i = 1; i < a.size(); ++i)
        if (!std::isalpha(static_cast<unsigned char>(a[i]))) return false;
    return true;
}

}  // namespace

std::vector<std::string> rewrite_llama_habits(std::vector<std::string> args, std::vector<std::string>& notes) {
    if (args.size() < 2) return args;
    std::vector<std::string> out{args[0]};
    std::string sub = args[1];
    size_t i = 1;
    // The interactive flags turn `run` into `chat`, as llama-cli -cnv is its chat mode.
    bool to_chat = false;
    for (size_t k = 2; k < args.size(); ++k) {
        if (args[k] == "--") break;
        if (k > 2 && takes_text(args[k - 1])) continue;
        const std::string& a = args[k];
        if (a == "-cnv" || a == "--conversation" || a == "-i" || a == "--interactive" || a == "-if" || a == "--interactive-first")
            to_chat = true;
    }
    if (to_chat && sub == "run") {
        notes.push_back("-cnv / -i: starting kinfer chat (kinfer's interactive mode)");
        sub = "chat";
    }
    out.push_back(sub);
    for (i = 2; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--") {
            out.insert(out.end(), args.begin() + std::ptrdiff_t(i), args.end());
            break;
        }
        // llama-cli -cnv -p TEXT starts the conversation with TEXT; kinfer chat (typed, or reached
        // by -cnv / -i) takes every message from the terminal or a pipe: say what to type instead
        // of "unknown -p".
        if (sub == "chat" && (a == "-p" || a == "--prompt" || a == "-f" || a == "--file") && !takes_text(out.back()))
            usage_fail("{}: kinfer chat reads its messages from the terminal or a pipe (printf 'TEXT\\n' | kinfer chat); "
                       "-sys TEXT sets a system prompt, kinfer run -p TEXT answers once", a);
        if (takes_text(out.back()) && out.size() > 2) {   // the value of -p, -m, ...: as typed
            out.push_back(a);
            continue;
        }
        if (a == "-cnv" || a == "--conversation" || a == "-i" || a == "--interactive" || a == "-if" || a == "--interactive-first") {
            if (sub != "chat") usage_fail("{}: interactive mode is kinfer chat", a);
            continue;
        }
        if (a == "-v" || a == "--verbose" || a == "-lv" || a == "--verbosity" || a == "--log-verbose") {
            habits().verbose = true;
            if ((a == "-lv" || a == "--verbosity") && i + 1 < args.size()) ++i;
            continue;
        }
        if (a == "--log-disable") {
            habits().log_disable = true;
            continue;
        }
        if (a == "--mlock") {
            habits().mlock = true;
            continue;
        }
        bool done = false;
        for (const Rename& r : kRenames)
            if (a == r.from) {
                out.emplace_back(r.to);
                done = true;
                break;
            }
        for (const Accept& acc : kAccepted) {
            if (done) break;
            if (a != acc.flag) continue;
            if (acc.note) notes.emplace_back(acc.note);
            // -fa takes an optional on / off / auto in newer llama.cpp.
            if ((a == "-fa" || a == "--flash-attn") && i + 1 < args.size() &&
                (args[i + 1] == "on" || args[i + 1] == "off" || args[i + 1] == "auto" || args[i + 1] == "1" || args[i + 1] == "0"))
                ++i;
            done = true;
        }
        if (done) continue;
        for (const Instead& ins : kInstead)
            if (in_list(ins.flags, a)) usage_fail("{} is a llama.cpp option; {}", a, ins.what);
        // Anything else spelled like -abc would be split by CLI11 into -a bc: name it instead.
        if (one_dash_word(a)) usage_fail("unknown option '{}' (kinfer's long options start with two dashes; see kinfer {} --help)", a, sub);
        out.push_back(a);
    }
    return out;
}

void lock_memory_if_asked() {
    if (!habits().mlock) return;
    if (::mlockall(MCL_CURRENT) != 0)
        std::fprintf(stderr, "kinfer: warning: --mlock: cannot lock the model in RAM: %s (raise ulimit -l)\n", std::strerror(errno));
}

}  // namespace kinfer::cli
