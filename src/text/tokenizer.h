// Byte-level BPE tokenizer for Kimi models (and any tiktoken vocabulary).
//
// Two ways to build one:
//  - from a GGUF (`tokenizer.ggml.model = gpt2`): tokens in GPT-2 byte-to-unicode form, the merge
//    list, token types and special ids. Merging follows the merge list by rank, exactly as
//    llama.cpp does for `tokenizer.ggml.pre = kimi-k2`, so ids equal llama.cpp's;
//  - from a tiktoken rank file (`base64(token) rank` per line, e.g. Kimi's tiktoken.model):
//    merging picks the adjacent pair whose concatenation has the lowest rank, as tiktoken does.
// Either way the text is first split at special tokens (when parse_special is on, CONTROL and
// UNKNOWN tokens too; USER_DEFINED ones always), then by the pre-tokenizer (pretokenize.h),
// then each piece is BPE-encoded (with a cache of recent pieces).
//
// The converter uses vocab_from_tiktoken() to write a GGUF vocabulary the way llama.cpp's Kimi
// converter does (gpt2 token strings, merges recovered by BPE with lower ranks only, types).
#pragma once
#include "text/pretokenize.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kinfer::gguf {
class File;
}

namespace kinfer::text {

using Token = int32_t;
inline constexpr Token kNoToken = -1;

// GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
    Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// A vocabulary as a GGUF stores it (`tokenizer.ggml.*`, `tokenizer.chat_template`).
struct VocabData {
    std::string model = "gpt2";
    std::string pre = "kimi-k2";
    std::vector<std::string> tokens;   // GPT-2 byte-to-unicode strings; special tokens as plain text
    std::vector<int32_t> types;        // TokenType values, one per token
    std::vector<std::string> merges;   // "left right", in rank order
    Token bos = kNoToken, eos = kNoToken, eot = kNoToken, unk = kNoToken, pad = kNoToken;
    bool add_bos = false, add_eos = false;
    std::string chat_template;
};

// Reads the tokenizer keys of a GGUF file (validating counts and types; throws kinfer::Error).
VocabData vocab_from_gguf(const gguf::File& file);

// A tiktoken rank file: the byte string of every rank (empty where a rank is absent).
struct TiktokenRanks {
    std::vector<std::string> by_rank;
    size_t count = 0;   // ranks present
};
TiktokenRanks load_tiktoken(const std::string& path);            // throws kinfer::Error
TiktokenRanks parse_tiktoken(std::string_view text, const std::string& name = "<memory>");

// GPT-2's reversible byte <-> printable-unicode mapping used for GGUF token strings.
std::string bytes_to_gpt2(std::string_view bytes);
// Inverse; characters outside the mapping are kept as their UTF-8 bytes.
std::string gpt2_to_bytes(std::string_view text);

// BPE of one token's bytes using only ranks < max_rank (llama.cpp's QwenModel.bpe): the merge
// that produced a token is the pair this returns when it returns two parts.
std::vector<std::string> bpe_with_max_rank(const std::unordered_map<std::string, int32_t>& ranks,
                                           std::string_view token, int32_t max_rank);

// Builds a GGUF vocabulary from tiktoken ranks the way llama.cpp's Kimi converter does:
// token i = bytes_to_gpt2(rank i) (NORMAL), merges in rank order for every multi-byte rank whose
// lower-rank BPE ends in two parts; `specials` (id -> text) are CONTROL; ids below vocab_size
// that are neither are written as "[PAD{id}]" with type UNUSED. vocab_size 0 means
// max(id) + 1. Special ids (bos/eos/...) are left for the caller to set.
VocabData vocab_from_tiktoken(const TiktokenRanks& ranks, const std::map<Token, std::string>& specials,
                              size_t vocab_size = 0, std::string_view pre = "kimi-k2");

// Kimi's special-token table (tokenization_kimi.py): `count` slots from `first_id` (the real
// models: 163584, 256; the tiny test vocab: 4096, 256), each named by `named` (id -> text, e.g.
// tokenizer_config.json's added_tokens_decoder) or else "<|reserved_token_{id}|>".
std::map<Token, std::string> kimi_special_tokens(Token first_id, int count, const std::map<Token, std::string>& named);

class Tokenizer {
public:
    // Merge-list BPE (llama.cpp semantics). Throws kinfer::Error on an unusable vocabulary.
    static std::unique_ptr<Tokenizer> from_vocab(const VocabData& vocab);
    static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
    // Rank BPE (tiktoken semantics). `specials` (id -> text) are added as CONTROL tokens.
    static std::unique_ptr<Tokenizer> from_tiktoken(const TiktokenRanks& ranks, PreTokenizer pre,
                                                    const std::map<Token, std::string>& specials = {});
    static std::unique_ptr<Tokenizer> from_tiktoken_file(const std::string& path, PreTokenizer pre,
                                                         const std::map<Token, std::string>& specials = {});

    // Text -> ids. parse_special: match CONTROL / UNKNOWN token texts as single tokens (USER_DEFINED
    // ones are always matched, as in llama.cpp). add_bos / add_eos default to the vocab's flags
    // (-1), which are off for Kimi GGUFs. Safe to call from several threads.
    std::vector<Token> encode(std::string_view text, bool parse_special = true, int add_bos = -1,
                              int add_eos = -1) const;
    // Ids -> bytes. special: include the text of CONTROL / UNKNOWN tokens (as llama.cpp's
    // detokenize with unparse_special). The result may hold invalid UTF-8 if the ids do.
    std::string decode(const std::vector<Token>& ids, bool special = true) const;
    // The bytes one token stands for (a special token: its text). Empty for an invalid id.
    const std::string& piece(Token id) const;
    // The token's vocabulary string (GPT-2 form for GGUF vocabularies).
    const std::string& token_text(Token id) const;
    // Token whose vocabulary string is `text`, or kNoToken.
    Token find(std::string_view text) const;

    size_t n_tokens() const { return pieces_.size(); }
    TokenType type(Token id) const;
    bool is_special(Token id) const;   // CONTROL, UNKNOWN or USER_DEFINED
    PreTokenizer pre_tokenizer() const { return pre_; }
    bool uses_merges() const { return use_merges_; }
    Token bos() const { return bos_; }
    Token eos() const { return eos_; }
    Token eot() const { return eot_; }
    Token unk() const { return unk_; }
    Token pad() const { return pad_; }
    const std::string& chat_template() const { return chat_template_; }

    // End of generation, as llama.cpp decides it: eos, eot, and every token whose text is one of
    // [EOS] [EOT] <|im_end|> <|end_of_msg|> <|eot_id|> <|end|> <|endoftext|> <end_of_turn> [PAD]
    // ([PAD] is Kimi's FIM-pad token, which llama.cpp also counts as end of generation).
    bool is_eog(Token id) const;
    const std::vector<Token>& eog_ids() const { return eog_; }

private:
    Tokenizer() = default;
    void finish_setup(const std::vector<int32_t>& types);
    void encode_fragment(std::string_view text, std::vector<Token>& out) const;
    void encode_piece(std::string_view piece, std::vector<Token>& out) const;
    void bpe(std::string_view piece, std::vector<Token>& out) const;

    struct StrHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
    };
    using StrMap = std::unordered_map<std::string, Token, StrHash, std::equal_to<>>;
    struct Merge {
        int32_t rank;
        Token result;
    };

    PreTokenizer pre_ = PreTokenizer::KimiK2;
    bool use_merges_ = true;
    std::vector<std::string> texts_;    // vocabulary strings
    std::vector<std::string> pieces_;   // bytes
    std::vector<TokenType> types_;
    StrMap by_text_;                    // vocabulary string -> id
    StrMap by_bytes_;                   // bytes of NORMAL tokens -> id (rank mode and lookups)
    // (left << 32 | right) -> merge: open addressing with linear probing; a slot is empty when
    // its merge rank is -1.
    struct MergeSlot {
        uint64_t key = 0;
        Merge m{-1, kNoToken};
    };
    std::vector<MergeSlot> merge_table_;
    uint32_t merge_shift_ = 64;
    void add_merge(uint64_t key, Merge m);
    const Merge* find_merge(uint64_t key) const;
    Token byte_token_[256];
    Token bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, unk_ = kNoToken, pad_ = kNoToken;
    bool add_bos_ = false, add_eos_ = false;
    std::vector<Token> eog_;
    std::vector<char> is_eog_;
    std::string chat_template_;

    // Special tokens matched before BPE, longest first; grouped by length for lookups.
    std::vector<Token> specials_;
    std::string special_first_bytes_;   // 256 flags: can a special token start with this byte?

    // Direct-mapped cache of encoded pieces (up to 22 bytes, 8 tokens): one 64-byte slot per
    // hash, overwritten on collision. Zeroed memory from calloc, so untouched slots cost nothing.
    struct CacheSlot {
        uint64_t hash;
        uint8_t len, n;
        char key[22];
        Token ids[8];
    };
    static_assert(sizeof(CacheSlot) == 64);
    static constexpr size_t kCacheSlots = size_t{1} << 16;
    struct FreeDeleter {
        void operator()(void* p) const { std::free(p); }
    };
    mutable std::mutex cache_mu_;
    mutable std::unique_ptr<CacheSlot[], FreeDeleter> cache_;
};

// Incremental detokenizer for streaming output: push() returns the bytes that are safe to print,
// holding back a trailing incomplete UTF-8 sequence until the next token completes it, so no
// half character is ever emitted. flush() returns whatever is left (possibly invalid bytes).
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tok, bool special = true) : tok_(tok), special_(special) {}
    std::string push(Token id);
    std::string flush();

private:
    const Tokenizer& tok_;
    bool special_;
    std::string pending_;
};

}  // namespace kinfer::text
