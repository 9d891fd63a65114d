#!/usr/bin/env python3
"""Mutation checks (issue 20): each entry breaks kinfer on purpose in one place (a wrong rounding,
a dropped expert, an ignored temperature, ...), rebuilds what the test needs in BUILD_DIR, runs
the test that should catch it, and restores the file. A mutation the test does not catch is a
test that cannot fail. Run from a clean tree; the files are restored even if a build fails.

  python3 tools/mutate/run_mutations.py [M1 M2 ...]      (env BUILD_DIR, default build;
                                                            results also in BUILD_DIR/mutations.txt)
Needs ../shared/golden for the golden-dependent cases. Configure BUILD_DIR with
-DKINFER_UNITY=OFF so that each mutation recompiles one file, not a batch.
"""
import os, re, subprocess, sys, time
root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
build = os.environ.get("BUILD_DIR", "build")
M=[
 ("M1 Q8_0 quantizer truncates instead of rounding half away from zero", "quant/quantize_legacy.cpp",
  "y[i].qs[j] = int8_t(std::round(x[j] * id));  // half away from 0", "y[i].qs[j] = int8_t(std::trunc(x[j] * id));  // half away from 0",
  ["test_quant"], "{B}/tests/test_quant"),
 ("M2 the last expert's output is dropped in the batched MoE", "src/model/moe.cpp",
  "for (int64_t e = 0; e < E; ++e) be.scatter_weighted(yg", "for (int64_t e = 0; e < E - 1; ++e) be.scatter_weighted(yg",
  ["test_model"], "{B}/tests/test_model -tc='parity: k3-tiny-a F32 p64'"),
 ("M3 the temperature is ignored by the sampler", "src/text/sampler.cpp",
  "sum += (x.p = std::exp((x.logit - mx) / p_.temperature));", "sum += (x.p = std::exp((x.logit - mx) / 1.0f));",
  ["test_text","test_cli","kinfer"], "{B}/tests/test_text -tc='draws follow the tempered softmax: chi-square bound' && {B}/tests/test_cli -tc='run: --seed and --temp change the picks*'"),
 ("M4 top-p is ignored", "src/text/sampler.cpp",
  "if (p_.top_p < 1.0f) {", "if (false && p_.top_p < 1.0f) {",
  ["test_text"], "{B}/tests/test_text -tc='top-k*'"),
 ("M5 KLD skips base probabilities below e^-4 instead of e^-16", "src/cli/lib/perplexity_stats.cpp",
  "if (lpb > -16.f) kld +=", "if (lpb > -4.f) kld +=",
  ["test_perplexity","kinfer"], "{B}/tests/test_perplexity -tc='KL divergence and same-top % match*'"),
 ("M6 perplexity scores the last three quarters of each window, not the second half", "src/cli/cmd_perplexity.cpp",
  "const int64_t first = n_ctx / 2;", "const int64_t first = n_ctx / 4;",
  ["kinfer","test_perplexity"], "{B}/tests/test_perplexity -tc='perplexity of the shipped Q4_K_M models matches*'"),
 ("M7 O_DIRECT silently falls back to buffered reads", "src/runtime/expert_io.cpp",
  "direct_ = fd_ >= 0;", "if (fd_ >= 0) ::close(fd_); fd_ = -1; direct_ = false;",
  ["test_expert_store"], "{B}/tests/test_expert_store -tc='store: O_DIRECT is active*'"),
 ("M8 Q4_K_M keeps ffn_down at Q4_K on the use_more_bits layers (llama.cpp: Q6_K)", "src/cli/lib/quantize_plan.cpp",
  "else if (ft == Ftype::Q4_K_M) { if (use_more_bits(il, nl)) t = Type::Q6_K; }", "else if (ft == Ftype::Q4_K_M) { }",
  ["test_quantize","kinfer"], "{B}/tests/test_quantize -tc='quantize: the 19 mixtures*'"),
 ("M9 the Q8_0 activation blocks (AVX2) store their scale as amax/128 instead of amax/127", "quant/activations_avx2.cpp",
  "y[i].d = uint16_t(_cvtss_sh(amax / 127.f, 0));", "y[i].d = uint16_t(_cvtss_sh(amax / 128.f, 0));",
  ["test_model"], "{B}/tests/test_model -tc='parity: k3-tiny-a Q8_0 p64'"),
]
only = sys.argv[1:]
files = sorted({m[1] for m in M})
dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", *files], capture_output=True, text=True).stdout
if dirty:
    sys.exit(f"run_mutations: these files have uncommitted changes; commit or stash them first:\n{dirty}")
os.makedirs(f"{root}/{build}/mutations", exist_ok=True)
out = open(f"{root}/{build}/mutations.txt", "a")
for name, f, old, new, targets, test in M:
    tag = name.split()[0]
    if only and tag not in only:
        continue
    path = f"{root}/{f}"
    src = open(path).read()
    if old not in src:
        sys.exit(f"run_mutations: {tag}: the code to break is no longer in {f} (update the entry): {old}")
    open(path, "w").write(src.replace(old, new, 1))
    t0 = time.time()
    try:
        b = subprocess.run(f"cd {root} && nice -n 19 cmake --build {build} -j2 --target {' '.join(targets)}"
                           f" > {root}/{build}/mutations/build.log 2>&1", shell=True)
        if b.returncode:
            res = f"BUILD FAILED (see {build}/mutations/build.log)"
        else:
            log_path = f"{root}/{build}/mutations/{tag}.log"
            r = subprocess.run(f"cd {root} && {test.replace('{B}', build)} > {log_path} 2>&1", shell=True)
            counts = " ; ".join(x.strip() for x in re.findall(r"test cases:.*", open(log_path).read()))
            res = ("CAUGHT (test failed)" if r.returncode else "NOT CAUGHT (tests passed)") + " | " + counts
    finally:
        open(path, "w").write(src)
    line = f"{name} [{f}] -> {res} ({time.time() - t0:.0f} s)"
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()
# Leave the build as the tree is: rebuild what the mutations touched.
subprocess.run(f"cd {root} && cmake --build {build} -j2 > /dev/null", shell=True)
