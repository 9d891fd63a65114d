// Runs tests/reference/run.sh (PyTorch reference vs llama.cpp exact logits) and checks its result.
// A 'SKIP:' line from the script (no python3-torch, or no ../shared/golden) marks the case
// skipped; in CI both are failures (scripts/setup.sh installs python3-torch, CI has ../shared).
#include "test_util.h"

#include <string>

TEST_CASE("reference: PyTorch model matches llama.cpp exact F32 logits") {
    using namespace kinfer::test;
    const std::string script = std::string(KINFER_SOURCE_DIR) + "/tests/reference/run.sh";
    const std::string golden = golden_dir();
    const auto r = run_command("KINFER_GOLDEN_DIR='" + golden + "' bash '" + script + "'");
    MESSAGE(r.out);
    if (r.out.find("SKIP:") != std::string::npos && r.rc == 0) {
        const bool no_torch = r.out.find("python3-torch") != std::string::npos;
        skip_case(no_torch ? SkipKind::tool : SkipKind::golden, no_torch ? "python3-torch / python3-numpy not installed (scripts/setup.sh installs them)"
                                                                         : "../shared/golden missing");
        return;
    }
    CHECK(r.rc == 0);
    CHECK(r.out.find("FAIL") == std::string::npos);
    CHECK(r.out.find("PASS: k3-tiny-a-F32 p64") != std::string::npos);
    CHECK(r.out.find("PASS: kl-tiny-a-F32 p64") != std::string::npos);
}
