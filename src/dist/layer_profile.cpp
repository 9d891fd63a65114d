#include "dist/layer_profile.h"

#include "common/error.h"
#include "common/text_file.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kinfer::dist {

namespace {

std::vector<std::string> words(const std::string& line) {
    std::vector<std::string> w;
    std::istringstream is(line);
    for (std::string x; is >> x;) w.push_back(x);
    return w;
}

// The whole word as a number in [lo, hi], or nothing (from_chars takes no sign, space or
// trailing junk here: "-1" or "12x" never wraps or half-parses).
template <class T>
bool number(const std::string& s, T lo, T hi, T& out, int base = 10) {
    T v{};
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v < lo || v > hi) return false;
    out = v;
    return true;
}

}  // namespace

LayerProfile LayerProfile::load(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail("layer profile '{}': cannot open", path);
    std::string line;
    int lineno = 0;
    // The next line that is not empty or a comment.
    auto next = [&]() -> bool {
        while (std::getline(f, line)) {
            ++lineno;
            if (!line.empty() && line[0] != '#') return true;
        }
        return false;
    };
    auto bad = [&](const std::string& why) { fail("layer profile '{}' line {}: {}", path, lineno, why); };
    if (!next() || line != "kinfer-layer-profile 1") fail("layer profile '{}': the first line is not 'kinfer-layer-profile 1'", path);
    LayerProfile p;
    if (!next()) fail("layer profile '{}': missing the 'layers L fingerprint HEX model NAME' line", path);
    {
        const auto w = words(line);
        if (w.size() < 6 || w[0] != "layers" || w[2] != "fingerprint" || w[4] != "model" || w[3].size() != 16 ||
            !number(w[1], 1, kMaxLayers, p.n_layer) || !number(w[3], uint64_t(0), UINT64_MAX, p.fingerprint, 16))
            bad("expected 'layers L fingerprint <16 hex digits> model NAME'");
        const std::string head = fmt::format("layers {} fingerprint {} model ", w[1], w[3]);
        if (line.rfind(head, 0) != 0) bad("expected single spaces in 'layers L fingerprint HEX model NAME'");
        p.model_name = line.substr(head.size());
    }
    if (!next()) fail("layer profile '{}': missing the 'measured threads T prompt P batch B decode D' line", path);
    {
        const auto w = words(line);
        const int64_t most = int64_t(1) << 40;
        if (w.size() != 9 || w[0] != "measured" || w[1] != "threads" || w[3] != "prompt" || w[5] != "batch" || w[7] != "decode" ||
            !number(w[2], 1, 1 << 20, p.threads) || !number(w[4], int64_t(1), most, p.prompt) ||
            !number(w[6], int64_t(1), most, p.batch) || !number(w[8], int64_t(1), most, p.decode))
            bad("expected 'measured threads T prompt P batch B decode D'");
    }
    // Every layer in order, then the head: each exactly once, so nothing is missing or doubled.
    for (int il = 0; il <= p.n_layer; ++il) {
        const bool head = il == p.n_layer;
        const std::string want = head ? "head" : std::to_string(il);
        if (!next()) fail("layer profile '{}': ends before the line of {}", path, head ? "the head" : "layer " + want);
        const auto w = words(line);
        uint64_t d = 0, pf = 0;
        if (w.size() != 3 || w[0] != want || !number(w[1], uint64_t(0), kMaxNs, d) || !number(w[2], uint64_t(0), kMaxNs, pf))
            bad(fmt::format("expected '{} <decode ns> <prefill ns>' (each at most {})", want, kMaxNs));
        p.decode_ns.push_back(d), p.prefill_ns.push_back(pf);
    }
    if (next()) bad("more lines after the head's");
    return p;
}

std::string LayerProfile::text() const {
    std::string s = "kinfer-layer-profile 1\n";
    s += fmt::format("layers {} fingerprint {:016x} model {}\n", n_layer, fingerprint, model_name);
    s += fmt::format("measured threads {} prompt {} batch {} decode {}\n", threads, prompt, batch, decode);
    s += "# layer  decode-ns-per-token  prefill-ns-per-token  (layer 0 with the embedding)\n";
    for (size_t il = 0; il < decode_ns.size(); ++il)
        s += fmt::format("{} {} {}\n", il + 1 == decode_ns.size() ? "head" : std::to_string(il), decode_ns[il], prefill_ns[il]);
    return s;
}

void LayerProfile::save(const std::string& path) const {
    write_text_file(path, "layer profile", [&](std::ostream& f) { f << text(); });
}

void LayerProfile::check(const model::Model& m, const std::string& path) const {
    if (n_layer != m.hparams().n_layer)
        fail("layer profile '{}': measured on a {}-layer model ({}), this one has {} layers", path, n_layer, model_name,
             m.hparams().n_layer);
    if (fingerprint != m.fingerprint())
        fail("layer profile '{}': measured on another model or quantization ({}, fingerprint {:016x}), not {} ({:016x})", path,
             model_name, fingerprint, std::filesystem::path(m.path()).filename().string(), m.fingerprint());
}

StageCosts LayerProfile::costs(Balance by) const {
    if (by == Balance::bytes) fail("layer profile: bytes are not a measured time");
    const std::vector<uint64_t>& v = by == Balance::decode ? decode_ns : prefill_ns;
    StageCosts c;
    c.by = by;
    c.layer.assign(v.begin(), v.end() - 1);
    c.head = v.back();
    return c;
}

std::optional<StageCosts> costs_from_flags(const model::Model& m, const std::string& balance, const std::string& profile_path,
                                           LayerProfile* loaded) {
    const Balance by = balance.empty() ? (profile_path.empty() ? Balance::bytes : Balance::prefill) : parse_balance(balance);
    if (by != Balance::bytes && profile_path.empty())
        usage_fail("--balance {} needs --layer-profile FILE (written by kinfer bench --layer-times FILE)", balance_name(by));
    if (profile_path.empty()) return std::nullopt;
    LayerProfile p = LayerProfile::load(profile_path);
    p.check(m, profile_path);
    if (loaded) *loaded = p;
    if (by == Balance::bytes) return std::nullopt;
    return p.costs(by);
}

}  // namespace kinfer::dist
