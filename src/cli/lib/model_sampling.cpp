#include "cli/lib/model_sampling.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace kinfer::cli {

SamplingGiven sampling_flags_given(const CLI::App& app) {
    SamplingGiven g;
    g.temp = app.count("--temp") > 0;
    g.top_k = app.count("--top-k") > 0;
    g.top_p = app.count("--top-p") > 0;
    g.min_p = app.count("--min-p") > 0;
    g.repeat_penalty = app.count("--repeat-penalty") > 0;
    g.repeat_last_n = app.count("--repeat-last-n") > 0;
    return g;
}

namespace {

bool is_number(gguf::ValueType t) {
    using gguf::ValueType;
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
        case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
        case ValueType::FLOAT32: case ValueType::FLOAT64:
            return true;
        default:
            return false;
    }
}

// The key's value when it is a number within [lo, hi] (lo excluded when lo_open); otherwise
// nothing, with a warning line when the key is there but unusable.
std::optional<double> model_value(const gguf::File& f, const char* key, double lo, double hi, bool lo_open,
                                  std::string* warnings) {
    const gguf::Value* v = f.find(key);
    if (!v) return std::nullopt;
    if (!is_number(v->type())) {
        if (warnings) *warnings += fmt::format("the model's {} is a {}, not a number: not used\n", key, gguf::value_type_name(v->type()));
        return std::nullopt;
    }
    const double x = v->as_float();
    if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) {
        if (warnings) *warnings += fmt::format("the model's {} = {} is outside {}{}..{}: not used\n", key, x, lo_open ? "(" : "", lo, hi);
        return std::nullopt;
    }
    return x;
}

// v when it is a whole number (a count), else nothing and a warning.
std::optional<double> whole(std::optional<double> v, const char* key, std::string* warnings) {
    if (v && *v != std::floor(*v)) {
        if (warnings) *warnings += fmt::format("the model's {} = {} is not a whole number: not used\n", key, *v);
        return std::nullopt;
    }
    return v;
}

}  // namespace

std::string apply_model_sampling(const gguf::File& f, const SamplingGiven& given, text::SamplerParams& p,
                                 std::string* warnings) {
    std::string taken;
    // The keys are float32 (or integers): printed as such, "top_p 0.95" rather than the double 0.949999988...
    auto note = [&](const char* name, double v) {
        taken += fmt::format("{}{} {:g}", taken.empty() ? "" : ", ", name, float(v));
    };
    // The ranges are the flags' (cli/lib/generate.cpp).
    if (!given.temp)
        if (auto v = model_value(f, "general.sampling.temp", 0, 100, false, warnings)) p.temperature = float(*v), note("temp", *v);
    if (!given.top_k)
        if (auto v = whole(model_value(f, "general.sampling.top_k", 0, 1 << 30, false, warnings), "general.sampling.top_k", warnings))
            p.top_k = int(*v), note("top_k", *v);
    if (!given.top_p)
        if (auto v = model_value(f, "general.sampling.top_p", 0, 1, false, warnings)) p.top_p = float(*v), note("top_p", *v);
    if (!given.min_p)
        if (auto v = model_value(f, "general.sampling.min_p", 0, 1, false, warnings)) p.min_p = float(*v), note("min_p", *v);
    if (!given.repeat_penalty)
        if (auto v = model_value(f, "general.sampling.penalty_repeat", 0, 10, true, warnings))
            p.repeat_penalty = float(*v), note("penalty_repeat", *v);
    if (!given.repeat_last_n)
        if (auto v = whole(model_value(f, "general.sampling.penalty_last_n", -1, 1 << 30, false, warnings),
                           "general.sampling.penalty_last_n", warnings))
            p.penalty_last_n = int(*v), note("penalty_last_n", *v);
    return taken;
}

}  // namespace kinfer::cli
