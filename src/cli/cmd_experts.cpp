// kinfer experts PROFILE: summarises an expert routing profile written by --expert-profile
// (skew, traffic share of the hottest 10 % of experts, per-layer spread, hottest experts), to
// decide how large an expert cache pays off. The logic lives in runtime/expert_profile so that
// `kinfer info --experts PROFILE` can print the same report.
#include "cli/command.h"
#include "cli/lib/flag_check.h"
#include "common/safe_file.h"
#include "runtime/expert_profile.h"

#include <cstdio>
#include <memory>

namespace kinfer::cli {

KINFER_COMMAND("experts", "Summarise an expert routing profile (--expert-profile output)", [](CLI::App& app) {
    struct Args {
        std::string path;
        int top = 10;
    };
    auto a = std::make_shared<Args>();
    app.add_option("profile", a->path, "profile file written by --expert-profile")->required();
    app.add_option("--top", a->top, "how many of the hottest experts to list")->check(int_in(0, 1 << 20));
    return [a] {
        check_input_file(a->path, "experts");
        const auto p = runtime::ExpertProfile::load(a->path);
        std::fputs(runtime::format_summary(runtime::summarize(p, a->top)).c_str(), stdout);
        return 0;
    };
});

}  // namespace kinfer::cli
