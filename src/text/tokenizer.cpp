#include "text/tokenizer.h"

#include "common/error.h"
#include "gguf/reader.h"
#include "text/unicode.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <queue>
#include <sstream>

namespace kinfer::text {

// ---------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode mapping

namespace {

struct Gpt2Map {
    uint32_t byte_to_cp[256];
    std::unordered_map<uint32_t, uint8_t> cp_to_byte;
    Gpt2Map() {
        // Printable bytes map to themselves; the other 68 to U+0100 + n, in byte order.
        uint32_t n = 0;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            byte_to_cp[b] = printable ? b : 256 + n++;
            cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
        }
    }
};
const Gpt2Map& gpt2_map() {
    static const Gpt2Map m;
    return m;
}

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
    out.clear();
    uint32_t acc = 0;
    int bits = 0;
    size_t i = 0;
    for (; i < in.size() && in[i] != '='; ++i) {
        const int v = base64_value(in[i]);
        if (v < 0) return false;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xFF);
        }
    }
    for (; i < in.size(); ++i)
        if (in[i] != '=') return false;
    return true;
}

}  // namespace

std::string bytes_to_gpt2(std::string_view bytes) {
    const auto& m = gpt2_map();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) unicode::append_utf8(out, m.byte_to_cp[static_cast<uint8_t>(c)]);
    return out;
}

std::string gpt2_to_bytes(std::string_view text) {
    const auto& m = gpt2_map();
    std::string out;
    out.reserve(text.size());
    for (size_t p = 0; p < text.size();) {
        const unicode::Char c = unicode::decode(text, p);
        auto it = c.cp == unicode::kInvalid ? m.cp_to_byte.end() : m.cp_to_byte.find(c.cp);
        if (it != m.cp_to_byte.end()) out += static_cast<char>(it->second);
        else out.append(text.substr(p, c.len));
        p += c.len;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// tiktoken files

TiktokenRanks parse_tiktoken(std::string_view text, const std::string& name) {
    TiktokenRanks r;
    size_t line_no = 0;
    std::string bytes;
    for (size_t pos = 0; pos < text.size();) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const size_t sp = line.find(' ');
        if (sp == std::string_view::npos)
            fail("{}: line {}: expected '<base64 token> <rank>'", name, line_no);
        if (!base64_decode(line.substr(0, sp), bytes) || bytes.empty())
            fail("{}: line {}: bad base64 token", name, line_no);
        const std::string_view rs = line.substr(sp + 1);
        uint64_t rank = 0;
        if (rs.empty() || rs.size() > 9) fail("{}: line {}: bad rank", name, line_no);
        for (char c : rs) {
            if (c < '0' || c > '9') fail("{}: line {}: bad rank '{}'", name, line_no, rs);
            rank = rank * 10 + static_cast<uint64_t>(c - '0');
        }
        if (rank >= (1u << 24)) fail("{}: line {}: rank {} too large", name, line_no, rank);
        if (rank >= r.by_rank.size()) r.by_rank.resize(rank + 1);
        if (!r.by_rank[rank].empty()) fail("{}: line {}: rank {} appears twice", name, line_no, rank);
        r.by_rank[rank] = bytes;
        ++r.count;
    }
    if (r.count == 0) fail("{}: no tokens", name);
    return r;
}

TiktokenRanks load_tiktoken(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("{}: cannot open tiktoken file", path);
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_tiktoken(ss.str(), path);
}

std::vector<std::string> bpe_with_max_rank(const std::unordered_map<std::string, int32_t>& ranks,
                                           std::string_view token, int32_t max_rank) {
    std::vector<std::string> parts;
    for (char c : token) parts.emplace_back(1, c);
    std::string tmp;
    for (;;) {
        int32_t best = -1;
        size_t best_i = 0;
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
            tmp = parts[i];
            tmp += parts[i + 1];
            auto it = ranks.find(tmp);
            if (it != ranks.end() && (best < 0 || it->second < best)) {
                best = it->second;
                best_i = i;
            }
        }
        if (best < 0 || best >= max_rank) break;
        parts[best_i] += parts[best_i + 1];
        parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_i) + 1);
    }
    return parts;
}

VocabData vocab_from_tiktoken(const TiktokenRanks& ranks, const std::map<Token, std::string>& specials,
                              size_t vocab_size, std::string_view pre) {
    VocabData v;
    v.pre = std::string(pre);
    std::unordered_map<std::string, int32_t> rank_of;
    rank_of.reserve(ranks.count * 2);
    for (size_t r = 0; r < ranks.by_rank.size(); ++r)
        if (!ranks.by_rank[r].empty()) rank_of.emplace(ranks.by_rank[r], static_cast<int32_t>(r));
    for (size_t r = 0; r < ranks.by_rank.size(); ++r) {
        const std::string& tok = ranks.by_rank[r];
        if (tok.size() < 2) continue;
        auto parts = bpe_with_max_rank(rank_of, tok, static_cast<int32_t>(r));
        if (parts.size() == 2) v.merges.push_back(bytes_to_gpt2(parts[0]) + " " + bytes_to_gpt2(parts[1]));
    }
    size_t n = vocab_size;
    if (n == 0) {
        n = ranks.by_rank.size();
        if (!specials.empty()) n = std::max(n, static_cast<size_t>(specials.rbegin()->first) + 1);
    }
    v.tokens.resize(n);
    v.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
        auto sp = specials.find(static_cast<Token>(i));
        if (sp != specials.end()) {
            v.tokens[i] = sp->second;
            v.types[i] = static_cast<int32_t>(TokenType::Control);
        } else if (i < ranks.by_rank.size() && !ranks.by_rank[i].empty()) {
            v.tokens[i] = bytes_to_gpt2(ranks.by_rank[i]);
            v.types[i] = static_cast<int32_t>(TokenType::Normal);
        } else {
            v.tokens[i] = "[PAD" + std::to_string(i) + "]";
            v.types[i] = static_cast<int32_t>(TokenType::Unused);
        }
    }
    return v;
}

std::map<Token, std::string> kimi_special_tokens(Token first_id, int count, const std::map<Token, std::string>& named) {
    std::map<Token, std::string> sp;
    for (Token id = first_id; id < first_id + count; ++id) sp[id] = "<|reserved_token_" + std::to_string(id) + "|>";
    for (const auto& [id, text] : named) sp[id] = text;
    return sp;
}

// ---------------------------------------------------------------------------------------------
// GGUF

VocabData vocab_from_gguf(const gguf::File& file) {
    VocabData v;
    const std::string& fname = file.path();
    v.model = std::string(file.get_string_or("tokenizer.ggml.model", ""));
    if (v.model != "gpt2")
        fail("{}: tokenizer.ggml.model is '{}', kinfer supports only 'gpt2' (byte-level BPE)", fname, v.model);
    v.pre = std::string(file.get_string_or("tokenizer.ggml.pre", "kimi-k2"));
    const gguf::Value& toks = file.get("tokenizer.ggml.tokens");
    if (!toks.is_array() || toks.array_type() != gguf::ValueType::STRING)
        fail("{}: tokenizer.ggml.tokens must be an array of strings", fname);
    const size_t n = toks.size();
    if (n == 0 || n > (1u << 30)) fail("{}: tokenizer.ggml.tokens has {} entries", fname, n);
    v.tokens.reserve(n);
    for (size_t i = 0; i < n; ++i) v.tokens.emplace_back(toks.string_at(i));
    if (const gguf::Value* types = file.find("tokenizer.ggml.token_type")) {
        if (!types->is_array() || types->size() != n)
            fail("{}: tokenizer.ggml.token_type must be an array of {} integers", fname, n);
        v.types.resize(n);
        for (size_t i = 0; i < n; ++i) v.types[i] = static_cast<int32_t>(types->int_at(i));
    } else {
        v.types.assign(n, static_cast<int32_t>(TokenType::Normal));
    }
    if (const gguf::Value* merges = file.find("tokenizer.ggml.merges")) {
        if (!merges->is_array() || merges->array_type() != gguf::ValueType::STRING)
            fail("{}: tokenizer.ggml.merges must be an array of strings", fname);
        v.merges.reserve(merges->size());
        for (size_t i = 0; i < merges->size(); ++i) v.merges.emplace_back(merges->string_at(i));
    }
    auto id = [&](const char* key) -> Token {
        const gguf::Value* val = file.find(key);
        if (!val) return kNoToken;
        const int64_t x = val->as_int();
        if (x < 0 || static_cast<uint64_t>(x) >= n) return kNoToken;   // llama.cpp ignores bad ids too
        return static_cast<Token>(x);
    };
    v.bos = id("tokenizer.ggml.bos_token_id");
    v.eos = id("tokenizer.ggml.eos_token_id");
    v.eot = id("tokenizer.ggml.eot_token_id");
    v.unk = id("tokenizer.ggml.unknown_token_id");
    v.pad = id("tokenizer.ggml.padding_token_id");
    v.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", false);
    v.add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
    v.chat_template = std::string(file.get_string_or("tokenizer.chat_template", ""));
    return v;
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
    return from_vocab(vocab_from_gguf(file));
}

// ---------------------------------------------------------------------------------------------
// Construction

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(const VocabData& v) {
    if (v.model != "gpt2") fail("tokenizer model '{}' is not supported (only gpt2 byte-level BPE)", v.model);
    auto pre = pretokenizer_from_name(v.pre);
    if (!pre) fail("pre-tokenizer '{}' is not supported (kinfer knows kimi-k2, o200k, cl100k)", v.pre);
    if (v.types.size() != v.tokens.size())
        fail("vocabulary has {} tokens but {} token types", v.tokens.size(), v.types.size());
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    t->pre_ = *pre;
    t->use_merges_ = true;
    const size_t n = v.tokens.size();
    t->texts_ = v.tokens;
    t->pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const auto ty = static_cast<TokenType>(v.types[i]);
        if (ty == TokenType::Normal || ty == TokenType::Undefined || ty == TokenType::Byte)
            t->pieces_[i] = gpt2_to_bytes(v.tokens[i]);
        else if (ty == TokenType::Unused)
            t->pieces_[i].clear();
        else
            t->pieces_[i] = v.tokens[i];
    }
    t->bos_ = v.bos;
    t->eos_ = v.eos;
    t->eot_ = v.eot;
    t->unk_ = v.unk;
    t->pad_ = v.pad;
    t->add_bos_ = v.add_bos;
    t->add_eos_ = v.add_eos;
    t->chat_template_ = v.chat_template;
    t->finish_setup(v.types);
    // Merges: "left right" in GPT-2 form; both sides and their concatenation must be tokens.
    size_t cap = 16;
    while (cap < v.merges.size() * 2) cap *= 2;
    t->merge_table_.assign(cap, MergeSlot{});
    t->merge_shift_ = 64 - static_cast<uint32_t>(__builtin_ctzll(cap));
    for (size_t r = 0; r < v.merges.size(); ++r) {
        const std::string& m = v.merges[r];
        const size_t sp = m.find(' ', 1);
        if (sp == std::string::npos) fail("merge {} ('{}') has no separating space", r, m);
        const Token a = t->find(std::string_view(m).substr(0, sp));
        const Token b = t->find(std::string_view(m).substr(sp + 1));
        if (a == kNoToken || b == kNoToken) continue;   // llama.cpp: such a merge can never apply
        const Token c = t->find(std::string(m.substr(0, sp)) + m.substr(sp + 1));
        if (c == kNoToken) continue;   // its result is not a token: skipped
        const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
        t->add_merge(key, Merge{static_cast<int32_t>(r), c});   // first (lowest) rank wins
    }
    return t;
}

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken(const TiktokenRanks& ranks, PreTokenizer pre,
                                                    const std::map<Token, std::string>& specials) {
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    t->pre_ = pre;
    t->use_merges_ = false;
    size_t n = ranks.by_rank.size();
    if (!specials.empty()) n = std::max(n, static_cast<size_t>(specials.rbegin()->first) + 1);
    t->texts_.resize(n);
    t->pieces_.resize(n);
    std::vector<int32_t> types(n, static_cast<int32_t>(TokenType::Unused));
    for (size_t i = 0; i < ranks.by_rank.size(); ++i) {
        if (ranks.by_rank[i].empty()) continue;
        t->pieces_[i] = ranks.by_rank[i];
        t->texts_[i] = bytes_to_gpt2(ranks.by_rank[i]);
        types[i] = static_cast<int32_t>(TokenType::Normal);
    }
    for (const auto& [id, text] : specials) {
        if (id < 0) fail("special token '{}' has a negative id", text);
        t->pieces_[id] = text;
        t->texts_[id] = text;
        types[id] = static_cast<int32_t>(TokenType::Control);
    }
    for (size_t i = 0; i < n; ++i)
        if (types[i] == static_cast<int32_t>(TokenType::Unused)) t->texts_[i] = "[PAD" + std::to_string(i) + "]";
    t->finish_setup(types);
    return t;
}

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken_file(const std::string& path, PreTokenizer pre,
                                                         const std::map<Token, std::string>& specials) {
    return from_tiktoken(load_tiktoken(path), pre, specials);
}

void Tokenizer::finish_setup(const std::vector<int32_t>& types) {
    const size_t n = texts_.size();
    types_.resize(n);
    for (size_t i = 0; i < n; ++i) types_[i] = static_cast<TokenType>(types[i]);
    by_text_.reserve(n * 2);
    by_bytes_.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) {
        by_text_.emplace(texts_[i], static_cast<Token>(i));   // first id wins on duplicates
        const TokenType ty = types_[i];
        if ((ty == TokenType::Normal || ty == TokenType::Undefined || ty == TokenType::Byte) && !pieces_[i].empty())
            by_bytes_.emplace(pieces_[i], static_cast<Token>(i));
    }
    for (int b = 0; b < 256; ++b) {
        auto it = by_bytes_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
        byte_token_[b] = it == by_bytes_.end() ? kNoToken : it->second;
    }
    // Special tokens: CONTROL, USER_DEFINED, UNKNOWN; longest first (ties by id).
    specials_.clear();
    special_first_bytes_.assign(256, 0);
    for (size_t i = 0; i < n; ++i) {
        const TokenType ty = types_[i];
        if ((ty == TokenType::Control || ty == TokenType::UserDefined || ty == TokenType::Unknown) && !texts_[i].empty()) {
            specials_.push_back(static_cast<Token>(i));
            special_first_bytes_[static_cast<uint8_t>(texts_[i][0])] = 1;
        }
    }
    std::stable_sort(specials_.begin(), specials_.end(),
                     [&](Token a, Token b) { return texts_[a].size() > texts_[b].size(); });
    // End of generation.
    is_eog_.assign(n, 0);
    eog_.clear();
    auto add_eog = [&](Token id) {
        if (id >= 0 && static_cast<size_t>(id) < n && !is_eog_[id]) {
            is_eog_[id] = 1;
            eog_.push_back(id);
        }
    };
    add_eog(eos_);
    add_eog(eot_);
    static const char* const kEogTexts[] = {"[EOS]", "[EOT]", "<|im_end|>", "<|end_of_msg|>", "<|eot_id|>",
                                            "<|end|>", "<|endoftext|>", "<end_of_turn>", "[PAD]"};
    for (const char* s : kEogTexts) {
        const Token id = find(s);
        if (id != kNoToken && is_special(id)) add_eog(id);
    }
    std::sort(eog_.begin(), eog_.end());
}

void Tokenizer::add_merge(uint64_t key, Merge m) {
    const size_t mask = merge_table_.size() - 1;
    for (size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> merge_shift_);; i = (i + 1) & mask) {
        MergeSlot& s = merge_table_[i];
        if (s.m.rank < 0) {
            s.key = key;
            s.m = m;
            return;
        }
        if (s.key == key) return;   // keep the lower rank, added first
    }
}

const Tokenizer::Merge* Tokenizer::find_merge(uint64_t key) const {
    if (merge_table_.empty()) return nullptr;
    const size_t mask = merge_table_.size() - 1;
    for (size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> merge_shift_);; i = (i + 1) & mask) {
        const MergeSlot& s = merge_table_[i];
        if (s.m.rank < 0) return nullptr;
        if (s.key == key) return &s.m;
    }
}

// ---------------------------------------------------------------------------------------------
// Queries

const std::string& Tokenizer::piece(Token id) const {
    static const std::string empty;
    if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return empty;
    return pieces_[id];
}

const std::string& Tokenizer::token_text(Token id) const {
    static const std::string empty;
    if (id < 0 || static_cast<size_t>(id) >= texts_.size()) return empty;
    return texts_[id];
}

Token Tokenizer::find(std::string_view text) const {
    auto it = by_text_.find(text);
    return it == by_text_.end() ? kNoToken : it->second;
}

TokenType Tokenizer::type(Token id) const {
    if (id < 0 || static_cast<size_t>(id) >= types_.size()) return TokenType::Undefined;
    return types_[id];
}

bool Tokenizer::is_special(Token id) const {
    const TokenType t = type(id);
    return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

bool Tokenizer::is_eog(Token id) const {
    return id >= 0 && static_cast<size_t>(id) < is_eog_.size() && is_eog_[id];
}

// ---------------------------------------------------------------------------------------------
// Encoding

std::vector<Token> Tokenizer::encode(std::string_view text, bool parse_special, int add_bos, int add_eos) const {
    std::vector<Token> out;
    out.reserve(text.size() / 3 + 4);
    if ((add_bos < 0 ? add_bos_ : add_bos != 0) && bos_ != kNoToken) out.push_back(bos_);

    // Split at special tokens with llama.cpp's priority: each special token, longest first,
    // claims its leftmost non-overlapping occurrences inside text no longer-or-earlier token
    // claimed. First find every candidate occurrence in one pass.
    std::vector<std::pair<size_t, Token>> found;   // (position, token), matched later by priority
    bool any_special = false;
    for (Token id : specials_) {
        if (parse_special || types_[id] == TokenType::UserDefined) {
            any_special = true;
            break;
        }
    }
    if (any_special) {
        // Candidate starts: the bytes special tokens begin with (usually just '<' and '['),
        // found with memchr.
        std::vector<std::pair<const char*, char>> next;   // next occurrence of each first byte
        for (int b = 0; b < 256; ++b)
            if (special_first_bytes_[b]) next.emplace_back(nullptr, static_cast<char>(b));
        const char* base = text.data();
        const char* end = base + text.size();
        for (auto& [at, b] : next) at = static_cast<const char*>(std::memchr(base, static_cast<unsigned char>(b), text.size()));
        for (;;) {
            const char* p = nullptr;
            for (const auto& [at, b] : next)
                if (at && (!p || at < p)) p = at;
            if (!p) break;
            const size_t pos = static_cast<size_t>(p - base);
            for (Token id : specials_) {
                if (!parse_special && types_[id] != TokenType::UserDefined) continue;
                const std::string& s = texts_[id];
                if (s[0] == *p && s.size() <= text.size() - pos && std::memcmp(p, s.data(), s.size()) == 0)
                    found.emplace_back(pos, id);
            }
            for (auto& [at, b] : next)
                if (at == p) at = static_cast<const char*>(std::memchr(p + 1, static_cast<unsigned char>(b), static_cast<size_t>(end - p - 1)));
        }
    }
    if (found.empty()) {
        encode_fragment(text, out);
    } else {
        // Process tokens in priority order (the order of specials_), claiming byte ranges.
        std::vector<size_t> order_of(texts_.size(), 0);
        for (size_t i = 0; i < specials_.size(); ++i) order_of[specials_[i]] = i;
        std::stable_sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
            return order_of[a.second] != order_of[b.second] ? order_of[a.second] < order_of[b.second] : a.first < b.first;
        });
        std::vector<char> claimed(text.size(), 0);
        std::vector<std::pair<size_t, Token>> accepted;
        size_t last_end = 0;
        Token last_id = kNoToken;
        for (const auto& [p, id] : found) {
            const size_t len = texts_[id].size();
            if (id != last_id) {
                last_id = id;
                last_end = 0;
            }
            if (p < last_end) continue;   // overlaps this token's previous occurrence
            bool free = true;
            for (size_t k = p; k < p + len; ++k)
                if (claimed[k]) {
                    free = false;
                    break;
                }
            if (!free) continue;
            std::fill(claimed.begin() + static_cast<std::ptrdiff_t>(p),
                      claimed.begin() + static_cast<std::ptrdiff_t>(p + len), 1);
            accepted.emplace_back(p, id);
            last_end = p + len;
        }
        std::sort(accepted.begin(), accepted.end());
        size_t pos = 0;
        for (const auto& [p, id] : accepted) {
            if (p > pos) encode_fragment(text.substr(pos, p - pos), out);
            out.push_back(id);
            pos = p + texts_[id].size();
        }
        if (pos < text.size()) encode_fragment(text.substr(pos), out);
    }
    if ((add_eos < 0 ? add_eos_ : add_eos != 0) && eos_ != kNoToken) out.push_back(eos_);
    return out;
}

void Tokenizer::encode_fragment(std::string_view text, std::vector<Token>& out) const {
    std::unique_lock<std::mutex> lock(cache_mu_);
    for (size_t pos = 0; pos < text.size();) {
        const size_t end = next_piece(pre_, text, pos);
        encode_piece(text.substr(pos, end - pos), out);
        pos = end;
    }
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<Token>& out) const {
    if (piece.size() == 1) {
        const Token t = byte_token_[static_cast<uint8_t>(piece[0])];
        if (t != kNoToken) out.push_back(t);
        return;
    }
    if (!use_merges_) {   // tiktoken: a piece that is a token is taken whole
        auto it = by_bytes_.find(piece);
        if (it != by_bytes_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    // FNV-1a of the piece picks the cache slot.
    const bool cacheable = piece.size() <= sizeof(CacheSlot::key);
    CacheSlot* slot = nullptr;
    uint64_t h = 1469598103934665603ull;
    if (cacheable) {
        for (char c : piece) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
        h ^= h >> 29;   // splitmix64's finaliser: FNV's low and high bits mix poorly on short keys
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 32;
        h |= 1;   // never 0, the hash of an empty slot
        if (!cache_) {
            cache_.reset(static_cast<CacheSlot*>(std::calloc(kCacheSlots, sizeof(CacheSlot))));
            if (!cache_) fail("tokenizer: out of memory for the piece cache");
        }
        slot = &cache_[(h >> 1) & (kCacheSlots - 1)];
        if (slot->hash == h && slot->len == piece.size() && std::memcmp(slot->key, piece.data(), piece.size()) == 0) {
            out.insert(out.end(), slot->ids, slot->ids + slot->n);
            return;
        }
    }
    const size_t start = out.size();
    bpe(piece, out);
    const size_t produced = out.size() - start;
    if (slot && produced <= 8) {
        slot->hash = h;
        slot->len = static_cast<uint8_t>(piece.size());
        slot->n = static_cast<uint8_t>(produced);
        std::memcpy(slot->key, piece.data(), piece.size());
        std::copy(out.begin() + static_cast<std::ptrdiff_t>(start), out.end(), slot->ids);
    }
}

// Byte-pair merging over the piece's bytes. Each step merges the adjacent pair of lowest
// priority (merge rank, or the rank of the concatenation in tiktoken mode), the leftmost on ties,
// until no pair can merge. Short pieces use a plain scan; long ones a heap over a linked list.
void Tokenizer::bpe(std::string_view piece, std::vector<Token>& out) const {
    const size_t n = piece.size();
    if (n <= 64) {
        // tiktoken's scheme on small arrays: the priority of each adjacent pair is kept and only
        // the two pairs around a merge are looked up again.
        uint32_t start[66];
        Token id[65];
        int32_t rank[65];
        Token res[65];
        size_t m = n;
        for (size_t i = 0; i < n; ++i) {
            start[i] = static_cast<uint32_t>(i);
            id[i] = byte_token_[static_cast<uint8_t>(piece[i])];
        }
        start[n] = static_cast<uint32_t>(n);
        auto pair_rank = [&](size_t k) -> int32_t {   // parts k and k+1
            if (use_merges_) {
                if (id[k] < 0 || id[k + 1] < 0) return -1;
                const Merge* mg = find_merge((static_cast<uint64_t>(static_cast<uint32_t>(id[k])) << 32) |
                                             static_cast<uint32_t>(id[k + 1]));
                if (!mg) return -1;
                res[k] = mg->result;
                return mg->rank;
            }
            auto it = by_bytes_.find(piece.substr(start[k], start[k + 2] - start[k]));
            if (it == by_bytes_.end()) return -1;
            res[k] = it->second;
            return it->second;
        };
        for (size_t k = 0; k + 1 < m; ++k) rank[k] = pair_rank(k);
        while (m > 1) {
            size_t best = m;
            int32_t best_rank = INT32_MAX;
            for (size_t k = 0; k + 1 < m; ++k)
                if (rank[k] >= 0 && rank[k] < best_rank) {
                    best_rank = rank[k];
                    best = k;
                }
            if (best == m) break;
            id[best] = res[best];
            for (size_t k = best + 1; k + 1 < m; ++k) {
                id[k] = id[k + 1];
                start[k] = start[k + 1];
                rank[k] = rank[k + 1];
                res[k] = res[k + 1];
            }
            --m;
            start[m] = static_cast<uint32_t>(n);
            if (best + 1 < m) rank[best] = pair_rank(best);
            if (best > 0) rank[best - 1] = pair_rank(best - 1);
        }
        for (size_t k = 0; k < m; ++k)
            if (id[k] >= 0) out.push_back(id[k]);
        return;
    }

    // Long pieces: a heap of candidate pairs over a linked list of symbols.
    struct Sym {
        uint32_t start;
        int32_t prev, next;
        Token id;
    };
    std::vector<Sym> syms;
    syms.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        syms.push_back({static_cast<uint32_t>(i), static_cast<int32_t>(i) - 1,
                        i + 1 < n ? static_cast<int32_t>(i + 1) : -1, byte_token_[static_cast<uint8_t>(piece[i])]});
    }
    auto sym_end = [&](int32_t i) -> uint32_t {
        return syms[i].next >= 0 ? syms[syms[i].next].start : static_cast<uint32_t>(n);
    };
    // Priority and result of merging symbol i with its successor; rank < 0 when impossible.
    auto pair = [&](int32_t i, Token& result) -> int32_t {
        const int32_t j = syms[i].next;
        if (j < 0) return -1;
        if (use_merges_) {
            if (syms[i].id < 0 || syms[j].id < 0) return -1;
            const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(syms[i].id)) << 32) |
                                 static_cast<uint32_t>(syms[j].id);
            const Merge* mg = find_merge(key);
            if (!mg) return -1;
            result = mg->result;
            return mg->rank;
        }
        auto it = by_bytes_.find(piece.substr(syms[i].start, sym_end(j) - syms[i].start));
        if (it == by_bytes_.end()) return -1;
        result = it->second;
        return it->second;
    };
    auto merge = [&](int32_t i, Token result) {
        const int32_t j = syms[i].next;
        syms[i].id = result;
        syms[i].next = syms[j].next;
        if (syms[j].next >= 0) syms[syms[j].next].prev = i;
        syms[j].id = kNoToken;
        syms[j].start = UINT32_MAX;   // dead
    };

    {
        struct Cand {
            int32_t rank;
            int32_t left, right;
            Token lid, rid, result;
            bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
        };
        std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
        auto push = [&](int32_t i) {
            if (i < 0) return;
            Token r;
            const int32_t rank = pair(i, r);
            if (rank >= 0) q.push({rank, i, syms[i].next, syms[i].id, syms[syms[i].next].id, r});
        };
        for (int32_t i = 0; i >= 0; i = syms[i].next) push(i);
        while (!q.empty()) {
            const Cand c = q.top();
            q.pop();
            if (syms[c.left].start == UINT32_MAX || syms[c.left].next != c.right || syms[c.left].id != c.lid ||
                syms[c.right].id != c.rid)
                continue;   // stale
            merge(c.left, c.result);
            push(syms[c.left].prev);
            push(c.left);
        }
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        if (syms[i].id >= 0) {
            out.push_back(syms[i].id);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

std::string Tokenizer::decode(const std::vector<Token>& ids, bool special) const {
    std::string out;
    for (Token id : ids) {
        const TokenType t = type(id);
        if (!special && (t == TokenType::Control || t == TokenType::Unknown)) continue;
        out += piece(id);
    }
    return out;
}

std::string StreamDecoder::push(Token id) {
    const TokenType t = tok_.type(id);
    if (!special_ && (t == TokenType::Control || t == TokenType::Unknown)) return {};
    pending_ += tok_.piece(id);
    const size_t hold = unicode::incomplete_utf8_tail(pending_);
    std::string ready = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return ready;
}

std::string StreamDecoder::flush() {
    std::string rest;
    rest.swap(pending_);
    return rest;
}

}  // namespace kinfer::text
