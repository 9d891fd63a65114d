// kinfer quantize IN OUT TYPE [NTHREADS]: llama-quantize for Kimi models. The per-tensor type
// choices live in cli/lib/quantize_plan; this file streams the tensors: dequantize a chunk of
// rows to f32 when needed, quantize it with ggml's reference kernels on all threads, and hand
// it to the GGUF writer, so memory stays at one chunk however large the model is.
#include "cli/command.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/quantize_plan.h"
#include "common/error.h"
#include "common/progress_line.h"
#include "common/safe_file.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "quant/types.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace kinfer::cli {
namespace {

using quant::Type;
constexpr uint32_t kQuantizationVersion = 2;   // GGML_QNT_VERSION, written as general.quantization_version
constexpr double kMiB = 1024.0 * 1024.0;

struct Args {
    std::vector<std::string> positional;
    int threads = 0;
    bool pure = false, dry_run = false, allow_requantize = false, leave_output = false;
    std::string output_tensor_type, token_embedding_type;
    int debug_tensor_delay_ms = 0;   // hidden test hook: pause after each tensor (the signal tests)
};

// ---- row conversion ----

// Runs fn(first_row, n_rows) over [0, rows) on up to `threads` threads, contiguous ranges.
template <typename Fn>
void parallel_rows(int64_t rows, int threads, Fn fn) {
    const int n = int(std::max<int64_t>(1, std::min<int64_t>(threads, rows)));
    if (n == 1) return fn(int64_t(0), rows);
    std::vector<std::thread> pool;
    std::exception_ptr err;
    std::mutex mu;
    for (int i = 0; i < n; ++i) {
        const int64_t a = rows * i / n, b = rows * (i + 1) / n;
        pool.emplace_back([&, a, b] {
            try {
                fn(a, b - a);
            } catch (...) {
                std::lock_guard<std::mutex> lk(mu);
                if (!err) err = std::current_exception();
            }
        });
    }
    for (auto& t : pool) t.join();
    if (err) std::rethrow_exception(err);
}

// Converts `rows` rows of n_per_row elements from src (type `from`) to dst (type `to`).
// Quantization is row by row with the kernels ggml_quantize_chunk uses without an imatrix
// (each block is independent, so rows give the same bytes as whole-matrix calls).
void convert_rows(const uint8_t* src, Type from, uint8_t* dst, Type to, int64_t n_per_row, int64_t rows,
                  int threads, const std::string& name) {
    const quant::Traits& tf = quant::traits(from);
    const quant::Traits& tt = quant::traits(to);
    if (from != Type::F32 && !tf.to_float) fail("quantize: tensor {}: cannot convert from {}", name, tf.name);
    const quant::FromFloatFn q = tt.quantize ? tt.quantize : tt.from_float_ref;
    if (to != Type::F32 && !q) fail("quantize: tensor {}: no quantizer for {}", name, tt.name);
    const size_t src_row = quant::row_size(tf, n_per_row), dst_row = quant::row_size(tt, n_per_row);
    // Enough rows per thread that spawning threads for tiny tensors does not dominate.
    const int64_t min_rows_per_thread = std::max<int64_t>(1, 16384 / n_per_row);
    const int use = int(std::max<int64_t>(1, std::min<int64_t>(threads, rows / min_rows_per_thread)));
    parallel_rows(rows, use, [&](int64_t r0, int64_t nr) {
        std::vector<float> buf(from == Type::F32 ? 0 : size_t(n_per_row));
        for (int64_t r = r0; r < r0 + nr; ++r) {
            const uint8_t* s = src + size_t(r) * src_row;
            uint8_t* d = dst + size_t(r) * dst_row;
            const float* x = reinterpret_cast<const float*>(s);
            if (from != Type::F32) {
                tf.to_float(s, buf.data(), n_per_row);
                x = buf.data();
            }
            if (to == Type::F32) std::memcpy(d, x, dst_row);
            else q(x, d, n_per_row);
        }
    });
}

// ---- the command ----

std::string shape4(const int64_t ne[4]) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%6lld, %6lld, %6lld, %6lld", (long long)ne[0], (long long)ne[1], (long long)ne[2],
                  (long long)ne[3]);
    return buf;
}

quant::Type parse_type(const std::string& s, const char* flag) {
    auto t = quant::type_from_name(s);
    if (!t || !quant::traits_or_null(uint32_t(*t))) fail("quantize: {}: unknown tensor type '{}'", flag, s);
    return *t;
}

bool is_number(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Metadata as llama-quantize writes it: every input key in order, split keys dropped, then
// general.quantization_version and general.file_type re-added at the end (gguf_set_val_*
// removes a key and appends it).
void copy_metadata(const gguf::File& in, gguf::Writer& w, Ftype ftype) {
    for (const auto& v : in.kv()) {
        const std::string_view k = v.key;
        if (k == "general.quantization_version" || k == "general.file_type" || k == "split.no" ||
            k == "split.count" || k == "split.tensors.count")
            continue;
        w.add_value(v);
    }
    w.add_u32("general.quantization_version", kQuantizationVersion);
    w.add_u32("general.file_type", uint32_t(ftype));
}

int run_quantize(const Args& a) {
    // Positionals: IN OUT TYPE [NTHREADS], or with --dry-run also IN TYPE [NTHREADS].
    const auto& p = a.positional;
    std::string in_path, out_path, type_str, threads_str;
    const bool no_out = a.dry_run && p.size() >= 2 && ftype_from_name(p[1]) && (p.size() == 2 || (p.size() == 3 && is_number(p[2])));
    if (no_out) {
        in_path = p[0];
        type_str = p[1];
        if (p.size() == 3) threads_str = p[2];
    } else {
        if (p.size() < 3 || p.size() > 4) usage_fail("quantize: usage: kinfer quantize IN OUT TYPE [NTHREADS]");
        in_path = p[0];
        out_path = p[1];
        type_str = p[2];
        if (p.size() == 4) threads_str = p[3];
    }
    const auto ftype = ftype_from_name(type_str);
    if (!ftype) usage_fail("quantize: unknown type '{}'; one of: {}", type_str, ftype_list());
    int threads = a.threads;
    if (!threads_str.empty()) {
        if (!is_number(threads_str) || threads_str.size() > 6 || std::stoi(threads_str) < 1 || std::stoi(threads_str) > kMaxThreads)
            usage_fail("quantize: NTHREADS '{}' is outside the range 1..{}", threads_str, kMaxThreads);
        threads = std::stoi(threads_str);
    }
    if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
    check_input_file(in_path, "quantize: input");
    // Before any work: a missing or read-only directory, or a directory as OUT, fails now, not
    // after the first (or the last) tensor.
    if (!a.dry_run) check_output_path(out_path, "quantize: output");
    if (!a.dry_run) {
        std::error_code ec;
        if (std::filesystem::equivalent(in_path, out_path, ec))
            fail("quantize: input and output are the same file: {}", in_path);
    }

    QuantizeOptions opt;
    opt.ftype = *ftype;
    opt.pure = a.pure;
    opt.quantize_output_tensor = !a.leave_output;
    if (!a.output_tensor_type.empty()) opt.output_tensor_type = parse_type(a.output_tensor_type, "--output-tensor-type");
    if (!a.token_embedding_type.empty()) opt.token_embedding_type = parse_type(a.token_embedding_type, "--token-embedding-type");

    auto in = gguf::File::open(in_path);
    const QuantizePlan plan = [&] {
        try {
            return make_quantize_plan(describe(*in), opt);
        } catch (const Error& e) {
            fail("{}: {}", in_path, e.what());   // the planner knows tensors, not files
        }
    }();

    if (a.dry_run)
        std::fprintf(stderr, "kinfer quantize: calculating quantization size for '%s' as %s using %d threads\n",
                     in_path.c_str(), ftype_name(*ftype), threads);
    else
        std::fprintf(stderr, "kinfer quantize: quantizing '%s' to '%s' as %s using %d threads\n", in_path.c_str(),
                     out_path.c_str(), ftype_name(*ftype), threads);
    for (const auto& t : plan.tensors)
        if (!t.warning.empty()) std::fprintf(stderr, "%s\n", t.warning.c_str());
    if (!a.allow_requantize && !a.dry_run)
        for (const auto& t : plan.tensors)
            if (t.from != t.to && is_block_quantized(t.from))
                fail("{}: tensor {} is already {}: requantizing to {} needs --allow-requantize", in_path, t.name,
                     quant::traits(t.from).name, quant::traits(t.to).name);

    gguf::Writer w(a.dry_run ? in_path + ".dry-run" : out_path);   // a dry run never writes
    copy_metadata(*in, w, *ftype);
    for (const auto& t : plan.tensors) w.add_tensor(t.name, t.to, t.ne, t.n_dims);

    const auto& src_tensors = in->tensors();
    const size_t n = plan.tensors.size();
    ProgressLine progress(plan.total_from);
    size_t done = 0;
    std::vector<uint8_t> out_buf;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) {
        const PlannedTensor& t = plan.tensors[i];
        const gguf::TensorInfo& src = src_tensors[t.src];
        if (a.debug_tensor_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.debug_tensor_delay_ms));
        // Each tensor's log line is printed whole once its work is done: on a terminal, a line
        // left open while the progress line (stderr) redraws would be overwritten by it.
        char head[512];
        std::snprintf(head, sizeof head, "[%4zu/%4zu] %-36s - [%s], type = %6s, ", i + 1, n, t.name.c_str(),
                      shape4(src.ne).c_str(), quant::traits(t.from).name);
        if (a.dry_run) {
            std::fputs(head, stdout);
            if (t.from != t.to)
                std::printf("size = %8.2f MiB -> %8.2f MiB (%s)\n", t.from_bytes / kMiB, t.to_bytes / kMiB, quant::traits(t.to).name);
            else
                std::printf("size = %8.3f MiB\n", t.from_bytes / kMiB);
            continue;
        }
        if (t.from == t.to) {
            w.write_tensor(src.data, src.nbytes);
            done += src.nbytes;
            progress.clear();
            std::printf("%ssize = %8.3f MiB\n", head, t.from_bytes / kMiB);
            std::fflush(stdout);
            progress.update(done, t.name);
            continue;
        }
        // Stream in chunks of about 64 MiB of output so memory stays bounded.
        const int64_t n_per_row = t.ne[0];
        const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
        const size_t src_row = quant::row_size(quant::traits(t.from), n_per_row);
        const size_t dst_row = quant::row_size(quant::traits(t.to), n_per_row);
        const int64_t chunk = std::max<int64_t>(1, int64_t((size_t(64) << 20) / std::max<size_t>(dst_row, 1)));
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t nr = std::min(chunk, rows - r0);
            out_buf.resize(size_t(nr) * dst_row);
            convert_rows(src.data + size_t(r0) * src_row, t.from, out_buf.data(), t.to, n_per_row, nr, threads, t.name);
            w.write(out_buf.data(), out_buf.size());
            done += size_t(nr) * src_row;
            progress.update(done, t.name);
        }
        progress.clear();
        std::printf("%sconverting to %s .. size = %8.2f MiB -> %8.2f MiB\n", head, quant::traits(t.to).name,
                    t.from_bytes / kMiB, t.to_bytes / kMiB);
        std::fflush(stdout);
    }
    progress.clear();
    std::fflush(stdout);
    if (!a.dry_run) w.finish();

    const double bpw = plan.n_elements ? 8.0 / double(plan.n_elements) : 0.0;
    std::fprintf(stderr, "kinfer quantize: model size  = %8.2f MiB (%.2f BPW)\n", plan.total_from / kMiB, plan.total_from * bpw);
    std::fprintf(stderr, "kinfer quantize: quant size  = %8.2f MiB (%.2f BPW)\n", plan.total_to / kMiB, plan.total_to * bpw);
    if (plan.n_fallback > 0)
        std::fprintf(stderr, "kinfer quantize: WARNING: %d of %zu tensor(s) required fallback quantization\n", plan.n_fallback, n);
    if (a.dry_run) {
        std::printf("output file size = %llu bytes (%.2f MiB); nothing written\n", (unsigned long long)w.expected_file_size(),
                    w.expected_file_size() / kMiB);
    } else {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "kinfer quantize: wrote %s (%.2f MiB) in %.2f s\n", out_path.c_str(), w.bytes_written() / kMiB, s);
    }
    return 0;
}

std::function<int()> setup_quantize(CLI::App& app) {
    auto a = std::make_shared<Args>();
    app.add_option("args", a->positional, "IN OUT TYPE [NTHREADS]  (TYPE: " + ftype_list() + ")")->required();
    app.add_option("-t,--threads", a->threads, "Threads (default: all cores; NTHREADS overrides)")->check(int_in(1, kMaxThreads));
    app.add_option("--debug-tensor-delay", a->debug_tensor_delay_ms, "milliseconds to pause before each tensor")
        ->group("")->check(int_in(0, 60000));
    app.add_flag("--pure", a->pure, "Every quantizable tensor gets the base type (no mixture rules)");
    app.add_flag("--dry-run", a->dry_run, "Print the per-tensor plan and the output size; write nothing");
    app.add_flag("--allow-requantize", a->allow_requantize, "Allow re-quantizing tensors that are already quantized");
    app.add_flag("--leave-output-tensor", a->leave_output, "Keep output.weight in its input type");
    app.add_option("--output-tensor-type", a->output_tensor_type, "Type for output.weight (e.g. q8_0)");
    app.add_option("--token-embedding-type", a->token_embedding_type, "Type for token_embd.weight (e.g. q8_0)");
    return [a] { return run_quantize(*a); };
}

}  // namespace

KINFER_COMMAND("quantize", "Re-quantize a GGUF file (ggml block formats and llama.cpp mixtures)", setup_quantize);

}  // namespace kinfer::cli
