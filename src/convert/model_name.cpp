// See model_name.h. Follows Metadata.get_model_id_components and id_to_title step by step.
#include "convert/model_name.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <set>
#include <vector>

#include <fmt/format.h>

namespace kinfer::convert {

namespace {

bool is_lower(const std::string& w) {   // Python str.islower (ASCII)
    bool cased = false;
    for (unsigned char c : w) {
        if (std::isupper(c)) return false;
        if (std::islower(c)) cased = true;
    }
    return cased;
}

std::string title(const std::string& w) {   // Python str.title (ASCII)
    std::string r = w;
    bool prev_letter = false;
    for (char& c : r) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (std::isalpha(u)) {
            c = char(prev_letter ? std::tolower(u) : std::toupper(u));
            prev_letter = true;
        } else {
            prev_letter = false;
        }
    }
    return r;
}

std::string id_to_title(const std::string& s) {
    static const std::regex keep(R"(^(v\d+(?:\.\d+)*|\d.*)$)");
    std::string spaced = s;
    for (char& c : spaced)
        if (c == '-') c = ' ';
    std::string out, word;
    auto flush = [&] {
        if (word.empty()) return;
        if (!out.empty()) out += ' ';
        out += is_lower(word) && !std::regex_search(word, keep) ? title(word) : word;
        word.clear();
    };
    for (char c : spaced) {
        if (std::isspace(static_cast<unsigned char>(c))) flush();
        else word += c;
    }
    flush();
    return out;
}

std::string join(const std::vector<std::string>& parts, const std::vector<std::set<std::string>>& types,
                  const char* type, bool dedup = false, const char* exclude = nullptr) {
    std::string r;
    std::set<std::string> seen;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (!types[i].count(type) || (exclude && types[i].count(exclude))) continue;
        if (dedup && !seen.insert(parts[i]).second) continue;
        r += (r.empty() ? "" : "-") + parts[i];
    }
    return r;
}

}  // namespace

ModelName model_name_from_dir(const std::string& id, int64_t total_params) {
    ModelName m;
    m.name = id_to_title(id);
    if (id.find(' ') != std::string::npos) return m;
    std::string full = id;
    if (auto slash = id.find('/'); slash != std::string::npos) full = id.substr(slash + 1);

    std::vector<std::string> parts;
    for (size_t p = 0;;) {
        const size_t q = full.find('-', p);
        const std::string s = full.substr(p, q == std::string::npos ? std::string::npos : q - p);
        if (!s.empty()) parts.push_back(s);
        if (q == std::string::npos) break;
        p = q + 1;
    }
    std::vector<std::set<std::string>> types(parts.size());
    using std::regex;
    static const regex re_version(R"((v|iter)?\d+([.]\d+)*)", regex::icase);
    static const regex re_type(R"(i?q\d(_\w)*|b?fp?(16|32))", regex::icase);
    static const regex re_size(R"((([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl))", regex::icase);
    static const regex re_finetune(R"(chat|instruct|vision|lora)", regex::icase);
    for (size_t i = 0; i < parts.size(); ++i) {
        std::string part = parts[i];
        if (std::regex_match(part, re_version)) {
            types[i].insert("version");
        } else if (std::regex_match(part, re_type)) {
            types[i].insert("type");
            for (char& c : parts[i]) c = char(std::toupper(static_cast<unsigned char>(c)));
        } else if (i > 0 && std::regex_match(part, re_size)) {
            for (char& c : part)
                if (c == '_') c = '.';
            if (std::isdigit(static_cast<unsigned char>(part.back())) && part.size() >= 2)
                part = part.substr(0, part.size() - 2) + "." + part.back() + part[part.size() - 2];
            if (part.size() > 1 && std::isdigit(static_cast<unsigned char>(part[part.size() - 2])) &&
                std::string("kmbt").find(part.back()) != std::string::npos)
                part.back() = char(std::toupper(static_cast<unsigned char>(part.back())));
            if (total_params != 0) {
                // float(part[:-1]) * 1000 ** " KMBT".find(part[-1]); a ValueError keeps the part.
                const std::string num = part.substr(0, part.size() - 1);
                char* end = nullptr;
                const double v = std::strtod(num.c_str(), &end);
                const bool parsed = !num.empty() && end && *end == '\0' &&
                                    num.find_first_not_of("0123456789.+-eE") == std::string::npos;
                if (parsed) {
                    const long k = long(std::string(" KMBT").find(part.back()));
                    const double label = v * std::pow(1000.0, double(k == long(std::string::npos) ? -1 : k));
                    if (total_params > 0 && std::fabs(label - double(total_params)) > double(7 * total_params / 8)) {
                        types[i].insert("finetune");
                        part.back() = char(std::tolower(static_cast<unsigned char>(part.back())));
                    }
                }
            }
            if (types[i].empty()) types[i].insert("size_label");
            parts[i] = part;
        } else if (i > 0 && std::regex_match(part, re_finetune)) {
            types[i].insert("finetune");
        }
    }
    bool numeric_size = false;
    for (size_t i = 0; i < parts.size(); ++i)
        if (types[i].count("size_label"))
            for (char c : parts[i]) numeric_size |= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (numeric_size)
        for (size_t i = 0; i < parts.size(); ++i)
            if (types[i].count("size_label")) {
                bool alpha = true;
                for (char c : parts[i]) alpha &= std::isalpha(static_cast<unsigned char>(c)) != 0;
                if (alpha) types[i].erase("size_label");
            }
    bool at_start = true;
    for (size_t i = 0; i < parts.size(); ++i) {
        auto& t = types[i];
        if (at_start && ((t.empty() && std::isalpha(static_cast<unsigned char>(parts[i][0]))) || t.count("version"))) {
            t.insert("basename");
        } else {
            at_start = false;
            if (t.empty()) t.insert("finetune");
        }
    }
    for (size_t i = parts.size(); i-- > 0;) {
        if (types[i].count("basename") && types[i].size() > 1) types[i].erase("basename");
        else break;
    }
    const std::string basename = join(parts, types, "basename");
    const std::string size = join(parts, types, "size_label", true);
    const std::string finetune = join(parts, types, "finetune");
    const std::string version = join(parts, types, "version", false, "basename");
    if (!size.empty()) m.size_label = size;
    if (!finetune.empty()) m.finetune = finetune;
    if (!version.empty()) m.version = version;
    if (!basename.empty() && (m.size_label || m.finetune || m.version)) m.basename = basename;
    return m;
}

namespace {

std::string rounded_notation(double n, int min_digits) {
    double scaled;
    const char* suffix;
    if (n > 1e12) { scaled = n * 1e-12; suffix = "T"; }
    else if (n > 1e9) { scaled = n * 1e-9; suffix = "B"; }
    else if (n > 1e6) { scaled = n * 1e-6; suffix = "M"; }
    else { scaled = n * 1e-3; suffix = "K"; }
    // fix = max(min_digits - len(str(round(scaled)).lstrip('0')), 0); round() is half-even.
    std::string r = fmt::format("{}", (long long)std::nearbyint(scaled));
    r.erase(0, r.find_first_not_of('0') == std::string::npos ? r.size() : r.find_first_not_of('0'));
    const int fix = std::max(min_digits - int(r.size()), 0);
    return fmt::format("{:.{}f}{}", scaled, fix, suffix);
}

}  // namespace

std::string size_label(int64_t total, int64_t shared, int64_t expert, int64_t count) {
    if (count > 0) return fmt::format("{}x{}", count, rounded_notation(double(std::llabs(shared) + std::llabs(expert)), 2));
    return rounded_notation(double(std::llabs(total)), 2);
}

}  // namespace kinfer::convert
