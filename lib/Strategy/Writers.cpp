//===- Writers.cpp - Writing a strategy as YAML or JSON
//--------------------===//
//
// Every key of every section, in the model's order, with its value after
// defaults: what --print-strategy shows and --save-strategy writes. The
// text reads back as the same strategy.
//
//===----------------------------------------------------------------------===//

#include "Fields.h"
#include "strata/Support/ReplaceFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/YAMLTraits.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace strata;
using namespace strata::detail;

std::string strata::formatStrategyNumber(double d) {
  // The shortest text that reads back as the same double.
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    snprintf(buffer, sizeof(buffer), "%.*g", precision, d);
    double back;
    if (to_float(buffer, back) && back == d)
      break;
  }
  std::string text = buffer;
  if (text.find_first_of(".eEn") == std::string::npos)
    text += ".0";
  return text;
}

namespace {

std::string yamlString(StringRef s) {
  // Plain only when unambiguous in block and flow context alike, and not
  // readable as a boolean, a number or null.
  // (A leading '-' reads as a sequence entry: "-", "---".)
  bool plain = !s.empty() && !s.starts_with("-") && all_of(s, [](char c) {
    return isAlnum(c) || c == '_' || c == '.' || c == '/' || c == '-';
  });
  double d;
  if (plain && !yaml::parseBool(s) && s != "null" && !to_float(s, d))
    return s.str();
  std::string quoted = "\"";
  quoted += yaml::escape(s);
  quoted += '"';
  return quoted;
}

void writeYamlValue(raw_ostream &os, const Value &value, unsigned indent);

void writeYamlStringList(raw_ostream &os, const StringList &list) {
  os << "[";
  interleaveComma(list, os, [&](const std::string &s) { os << yamlString(s); });
  os << "]";
}

void writeYamlValue(raw_ostream &os, const Value &value, unsigned indent) {
  std::visit(
      [&](const auto &v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>)
          os << (v ? "true" : "false");
        else if constexpr (std::is_same_v<T, int64_t>)
          os << v;
        else if constexpr (std::is_same_v<T, double>)
          os << formatStrategyNumber(v);
        else if constexpr (std::is_same_v<T, std::string>)
          os << yamlString(v);
        else if constexpr (std::is_same_v<T, StringList>)
          writeYamlStringList(os, v);
        else if constexpr (std::is_same_v<T, IntList>) {
          os << "[";
          interleaveComma(v, os);
          os << "]";
        } else {
          if (v.empty()) {
            os << "[]";
            return;
          }
          for (const RefinedOpsPattern &p : v) {
            os << "\n";
            os.indent(indent) << "- main_ops: ";
            writeYamlStringList(os, p.main_ops);
            os << "\n";
            os.indent(indent + 2) << "num: " << p.num << "\n";
            os.indent(indent + 2) << "pre_ops: ";
            writeYamlStringList(os, p.pre_ops);
            os << "\n";
            os.indent(indent + 2) << "suf_ops: ";
            writeYamlStringList(os, p.suf_ops);
          }
        }
      },
      value);
}

json::Value toJsonValue(const Value &value) {
  return std::visit(
      [](const auto &v) -> json::Value {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, StringList> ||
                      std::is_same_v<T, IntList>) {
          json::Array a;
          for (const auto &item : v)
            a.push_back(item);
          return a;
        } else if constexpr (std::is_same_v<T, PatternList>) {
          json::Array a;
          for (const RefinedOpsPattern &p : v)
            a.push_back(json::Object{{"main_ops", p.main_ops},
                                     {"num", p.num},
                                     {"pre_ops", p.pre_ops},
                                     {"suf_ops", p.suf_ops}});
          return a;
        } else {
          return v;
        }
      },
      value);
}

} // namespace

std::string strata::toYaml(const Strategy &strategy) {
  std::string out;
  raw_string_ostream os(out);
  for (const SectionInfo &section : sections()) {
    os << section.name << ":\n";
    section.forEach(strategy, [&](StringRef key, const Value &value) {
      auto *patterns = std::get_if<PatternList>(&value);
      os << "  " << key << ((patterns && !patterns->empty()) ? ":" : ": ");
      writeYamlValue(os, value, 4);
      os << "\n";
    });
  }
  return out;
}

std::string strata::toJson(const Strategy &strategy) {
  std::string out;
  raw_string_ostream os(out);
  // Streamed rather than built as a json::Object, which would not keep the
  // model's order of sections and keys.
  json::OStream j(os, 2);
  j.object([&] {
    for (const SectionInfo &section : sections()) {
      j.attributeObject(section.name, [&] {
        section.forEach(strategy, [&](StringRef key, const Value &value) {
          j.attribute(key, toJsonValue(value));
        });
      });
    }
  });
  os << "\n";
  return out;
}

Error strata::saveStrategy(const Strategy &strategy, StringRef path) {
  std::string text =
      path.ends_with(".json") ? toJson(strategy) : toYaml(strategy);
  return replaceFile(path, [&](raw_ostream &os) { os << text; });
}
