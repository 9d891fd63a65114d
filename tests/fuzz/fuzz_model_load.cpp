// libFuzzer target for Model::load on GGUFs that parse but whose hyper-parameters and tensors
// disagree: the input is a list of edits applied to one of the two shipped tiny models
// (tests/data/models: change, remove or resize a metadata value; change a tensor's shape, type,
// rank or name; drop a tensor). The edited file is written with its tensor data left as a hole
// (zeros, no bytes written). Model::load must either throw kinfer::Error or return a model that
// a Session can prefill two tokens and decode one with. Crashes, hangs, sanitizer reports and
// other exceptions are bugs.
//
// Input: byte 0 picks the model (k3 / kl); then 8-byte edits: op, sel, u16 index, i32 value.
#include "fuzz_util.h"

#include "gguf/reader.h"
#include "model/model.h"
#include "model/session.h"
#include "quant/types.h"

#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kinfer;
using gguf::ValueType;

namespace {

struct Kv {
    std::string key;
    ValueType type = ValueType::UINT32;
    ValueType elem = ValueType::UINT32;    // arrays
    std::vector<uint8_t> bytes;            // scalar value, or fixed-size array payload
    std::vector<std::string> strs;         // string value (one) or string array
    uint64_t count = 0;
};

struct Tensor {
    std::string name;
    uint32_t type = 0;
    uint32_t n_dims = 1;
    int64_t ne[4] = {1, 1, 1, 1};
};

struct Base {
    std::vector<Kv> kv;
    std::vector<Tensor> tensors;
};

Base read_base(const std::string& path) {
    Base b;
    auto f = gguf::File::open(path);
    for (const auto& v : f->kv()) {
        if (v.key.starts_with("tokenizer.")) continue;   // not Model::load's business; keeps the file small
        Kv k;
        k.key = std::string(v.key);
        k.type = v.type();
        if (v.type() == ValueType::STRING) {
            k.strs.emplace_back(v.as_string());
        } else if (v.is_array()) {
            k.elem = v.array_type();
            k.count = v.size();
            if (k.elem == ValueType::STRING) {
                for (auto s : v.strings()) k.strs.emplace_back(s);
            } else {
                k.bytes.assign(v.raw(), v.raw() + v.raw_size());
            }
        } else {
            k.bytes.assign(v.raw(), v.raw() + v.raw_size());
        }
        b.kv.push_back(std::move(k));
    }
    // The vocabulary size the dropped token list gave.
    Kv vs;
    vs.key = f->architecture() + ".vocab_size";
    vs.type = ValueType::UINT32;
    const uint32_t n_vocab = uint32_t(f->get("tokenizer.ggml.tokens").size());
    vs.bytes.resize(4);
    std::memcpy(vs.bytes.data(), &n_vocab, 4);
    b.kv.push_back(vs);
    for (const auto& t : f->tensors()) {
        Tensor x;
        x.name = t.name;
        x.type = uint32_t(t.type);
        x.n_dims = uint32_t(t.n_dims);
        for (int d = 0; d < 4; ++d) x.ne[d] = t.ne[d];
        b.tensors.push_back(x);
    }
    return b;
}

const Base& base(int which) {
    static const Base k3 = read_base(std::string(KINFER_TEST_DATA_DIR) + "/models/k3-tiny-a-Q4_K_M.gguf");
    static const Base kl = read_base(std::string(KINFER_TEST_DATA_DIR) + "/models/kl-tiny-a-Q4_K_M.gguf");
    return which ? kl : k3;
}

void set_number(uint8_t* p, ValueType t, int32_t v, uint8_t sel) {
    switch (t) {
        case ValueType::FLOAT32: { float f = float(v) / float(1 + sel); std::memcpy(p, &f, 4); break; }
        case ValueType::FLOAT64: { double d = double(v) / double(1 + sel); std::memcpy(p, &d, 8); break; }
        case ValueType::BOOL: p[0] = uint8_t(v & 1); break;
        default: { const int64_t w = v; std::memcpy(p, &w, gguf::value_type_size(t)); break; }   // little-endian truncation
    }
}

void apply(Base& b, const uint8_t* e) {
    const uint8_t op = e[0] % 8, sel = e[1];
    const uint16_t idx = uint16_t(e[2] | (e[3] << 8));
    int32_t val;
    std::memcpy(&val, e + 4, 4);
    if (op <= 1 || op == 7) {
        if (b.kv.empty()) return;
        Kv& k = b.kv[idx % b.kv.size()];
        if (op == 1) { b.kv.erase(b.kv.begin() + (idx % b.kv.size())); return; }
        if (op == 0) {
            if (gguf::value_type_size(k.type)) set_number(k.bytes.data(), k.type, val, sel);
            else if (k.type == ValueType::ARRAY && gguf::value_type_size(k.elem) && k.count)
                set_number(k.bytes.data() + (sel % k.count) * gguf::value_type_size(k.elem), k.elem, val, 0);
            else if (k.type == ValueType::STRING) k.strs[0] = std::to_string(val);
            return;
        }
        // op 7: resize a numeric array (new entries copy the last one) or turn a scalar into an array
        const uint64_t n = uint64_t(val) % 64;
        if (k.type == ValueType::ARRAY && gguf::value_type_size(k.elem)) {
            const size_t w = gguf::value_type_size(k.elem);
            std::vector<uint8_t> last(k.bytes.end() - std::min<size_t>(w, k.bytes.size()), k.bytes.end());
            if (last.size() < w) last.assign(w, 0);
            k.bytes.resize(std::min<uint64_t>(n, k.count) * w);
            while (k.bytes.size() < n * w) k.bytes.insert(k.bytes.end(), last.begin(), last.end());
            k.count = n;
        } else if (gguf::value_type_size(k.type)) {
            const size_t w = gguf::value_type_size(k.type);
            std::vector<uint8_t> one = k.bytes;
            k.elem = k.type;
            k.type = ValueType::ARRAY;
            k.bytes.clear();
            for (uint64_t i = 0; i < n; ++i) k.bytes.insert(k.bytes.end(), one.begin(), one.begin() + w);
            k.count = n;
        }
        return;
    }
    if (b.tensors.empty()) return;
    const size_t ti = idx % b.tensors.size();
    Tensor& t = b.tensors[ti];
    switch (op) {
        case 2: t.ne[sel % 4] = int64_t(uint32_t(val) % (1u << 16)); break;
        case 3: t.type = uint32_t(val) % 40; break;
        case 4: b.tensors.erase(b.tensors.begin() + ti); break;
        case 5: std::swap(t.name, b.tensors[uint32_t(val) % b.tensors.size()].name); break;
        case 6:
            t.n_dims = 1 + sel % 4;
            for (uint32_t d = t.n_dims; d < 4; ++d) t.ne[d] = 1;
            break;
    }
}

void put(std::string& o, const void* p, size_t n) { o.append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string& o, T v) { put(o, &v, sizeof v); }
void put_str(std::string& o, const std::string& s) {
    put(o, uint64_t(s.size()));
    o += s;
}

// The GGUF's header; data_size receives the size of the data section, false when a tensor's
// size cannot be stated (then the reader would reject the file anyway: skip it).
bool serialize(const Base& b, std::string& o, uint64_t& data_size) {
    o.clear();
    o += "GGUF";
    put(o, uint32_t(3));
    put(o, uint64_t(b.tensors.size()));
    put(o, uint64_t(b.kv.size()));
    for (const auto& k : b.kv) {
        put_str(o, k.key);
        put(o, uint32_t(k.type));
        if (k.type == ValueType::STRING) {
            put_str(o, k.strs[0]);
        } else if (k.type == ValueType::ARRAY) {
            put(o, uint32_t(k.elem));
            put(o, k.count);
            if (k.elem == ValueType::STRING) for (const auto& s : k.strs) put_str(o, s);
            else o.append(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
        } else {
            o.append(reinterpret_cast<const char*>(k.bytes.data()), k.bytes.size());
        }
    }
    uint64_t off = 0;
    for (const auto& t : b.tensors) {
        const quant::Traits* tr = quant::traits_or_null(t.type);
        if (!tr || tr->block_size <= 0) return false;
        for (uint32_t d = 0; d < t.n_dims; ++d)
            if (t.ne[d] <= 0) return false;
        if (t.ne[0] % tr->block_size) return false;
        const uint64_t nbytes = uint64_t(t.ne[0] / tr->block_size) * tr->type_size * uint64_t(t.ne[1]) * uint64_t(t.ne[2]) * uint64_t(t.ne[3]);
        if (nbytes > (uint64_t(1) << 28)) return false;
        put_str(o, t.name);
        put(o, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) put(o, t.ne[d]);
        put(o, t.type);
        put(o, off);
        off += (nbytes + 31) / 32 * 32;
        if (off > (uint64_t(1) << 30)) return false;
    }
    o.resize((o.size() + 31) / 32 * 32, '\0');   // general.alignment: the base files use 32
    data_size = off;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    Base b = base(data[0] & 1);
    for (size_t i = 1; i + 8 <= size && i < 1 + 8 * 64; i += 8) apply(b, data + i);
    std::string hdr;
    uint64_t data_size = 0;
    if (!serialize(b, hdr, data_size)) return 0;
    static const std::string path = fuzz::scratch_path("model.gguf");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) __builtin_trap();
    if (::write(fd, hdr.data(), hdr.size()) != ssize_t(hdr.size())) __builtin_trap();
    if (::ftruncate(fd, off_t(hdr.size() + data_size)) != 0) __builtin_trap();   // the data: a hole of zeros
    ::close(fd);

    std::unique_ptr<model::Model> m;
    if (!fuzz::tolerate([&] { m = model::Model::load(path); })) return 0;
    fuzz::sink(m->describe());
    fuzz::tolerate([&] {
        model::SessionOptions opt;
        opt.n_ctx = 8;
        opt.n_batch = 2;
        opt.n_threads = 1;
        model::Session s(*m, opt);
        const int32_t ids[2] = {1, int32_t(m->hparams().n_vocab - 1)};
        s.prefill(ids);
        s.decode(2);
        if (s.logits().size() != size_t(m->hparams().n_vocab)) __builtin_trap();
    });
    return 0;
}
