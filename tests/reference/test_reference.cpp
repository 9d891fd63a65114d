// Runs tests/reference/run.sh (PyTorch reference vs llama.cpp exact logits) and checks its result.
// A 'SKIP:' line (no python3-torch, or no ../shared/golden) counts as a pass.
#include "test_util.h"

#include <string>

TEST_CASE("reference: PyTorch model matches llama.cpp exact F32 logits") {
    const std::string script = std::string(KINFER_SOURCE_DIR) + "/tests/reference/run.sh";
    const std::string golden = std::string(KINFER_GOLDEN_DIR);
    const auto r = kinfer::test::run_command("KINFER_GOLDEN_DIR='" + golden + "' bash '" + script + "'");
    MESSAGE(r.out);
    if (r.out.find("SKIP:") != std::string::npos && r.rc == 0) {
        std::printf("%s", r.out.c_str());
        return;
    }
    CHECK(r.rc == 0);
    CHECK(r.out.find("FAIL") == std::string::npos);
    CHECK(r.out.find("PASS: k3-tiny-a-F32 p64") != std::string::npos);
    CHECK(r.out.find("PASS: kl-tiny-a-F32 p64") != std::string::npos);
}
