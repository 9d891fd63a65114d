// See kv_list.h.
#include "convert/kv_list.h"

#include <fmt/format.h>

namespace kinfer::convert {

using gguf::ValueType;

KvList::Entry& KvList::slot(const std::string& k) {
    for (auto& e : kv_)
        if (e.key == k) {
            e = Entry{};
            e.key = k;
            return e;
        }
    kv_.push_back(Entry{});
    kv_.back().key = k;
    return kv_.back();
}

void KvList::set_u32(const std::string& k, uint32_t v) { auto& e = slot(k); e.type = ValueType::UINT32; e.u = v; }
void KvList::set_i32(const std::string& k, int32_t v) { auto& e = slot(k); e.type = ValueType::INT32; e.i = v; }
void KvList::set_f32(const std::string& k, float v) { auto& e = slot(k); e.type = ValueType::FLOAT32; e.f = v; }
void KvList::set_bool(const std::string& k, bool v) { auto& e = slot(k); e.type = ValueType::BOOL; e.b = v; }
void KvList::set_string(const std::string& k, std::string v) { auto& e = slot(k); e.type = ValueType::STRING; e.s = std::move(v); }
void KvList::set_i32_array(const std::string& k, std::vector<int32_t> v) {
    auto& e = slot(k);
    e.type = ValueType::ARRAY;
    e.ai = std::move(v);
}
void KvList::set_string_array(const std::string& k, std::vector<std::string> v) {
    auto& e = slot(k);
    e.type = ValueType::ARRAY;
    e.as = std::move(v);
    e.s = "strings";   // marks the element type
}

bool KvList::has(const std::string& k) const {
    for (const auto& e : kv_)
        if (e.key == k) return true;
    return false;
}

void KvList::apply(gguf::Writer& w) const {
    for (const auto& e : kv_) {
        switch (e.type) {
            case ValueType::UINT32: w.add_u32(e.key, uint32_t(e.u)); break;
            case ValueType::INT32: w.add_i32(e.key, int32_t(e.i)); break;
            case ValueType::FLOAT32: w.add_f32(e.key, e.f); break;
            case ValueType::BOOL: w.add_bool(e.key, e.b); break;
            case ValueType::STRING: w.add_string(e.key, e.s); break;
            case ValueType::ARRAY:
                if (e.s == "strings") w.add_string_array(e.key, std::span<const std::string>(e.as));
                else w.add_array_i32(e.key, e.ai);
                break;
            default: break;
        }
    }
}

std::vector<std::string> KvList::describe() const {
    std::vector<std::string> out;
    for (const auto& e : kv_) {
        std::string v;
        switch (e.type) {
            case ValueType::UINT32: v = fmt::format("UINT32  {}", e.u); break;
            case ValueType::INT32: v = fmt::format("INT32   {}", e.i); break;
            case ValueType::FLOAT32: v = fmt::format("FLOAT32 {}", e.f); break;
            case ValueType::BOOL: v = fmt::format("BOOL    {}", e.b); break;
            case ValueType::STRING:
                v = e.s.size() <= 60 && e.s.find('\n') == std::string::npos
                        ? fmt::format("STRING  '{}'", e.s) : fmt::format("STRING  <{} chars>", e.s.size());
                break;
            case ValueType::ARRAY:
                if (e.s == "strings") v = fmt::format("ARRAY[STRING] n={}", e.as.size());
                else v = fmt::format("ARRAY[INT32] n={}", e.ai.size());
                break;
            default: break;
        }
        out.push_back(fmt::format("{:<48} {}", e.key, v));
    }
    return out;
}

}  // namespace kinfer::convert
