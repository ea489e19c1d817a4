// write_stage_jsons MODEL_JSON OUT_DIR STAGES: cuts an exported program (a .pt2's
// models/model.json) into STAGES stages at allowed cuts as even in units as they can be, and
// writes each stage's model.json (exported_cut.h) as OUT_DIR/stage<i>.json; prints the stages'
// unit ranges. check_exported_cut.py makes archives of them and runs them in PyTorch.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "libs/exported/exported_cut.h"

using namespace ravnest::exported;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: write_stage_jsons MODEL_JSON OUT_DIR STAGES\n";
    return 2;
  }
  try {
    std::ifstream file(argv[1], std::ios::binary);
    if (!file) throw std::runtime_error(std::string(argv[1]) + ": cannot be read");
    std::stringstream text;
    text << file.rdbuf();
    const ExportedProgram program = parse_exported_program(text.str(), argv[1]);
    const ProgramUnits units = program_units(program);
    const size_t stages = std::stoul(argv[3]);
    const size_t n = units.size();
    // Stage k starts at the allowed cut nearest to k * n / stages after the previous start.
    std::vector<std::pair<size_t, size_t>> ranges;
    size_t start = 0;
    for (size_t k = 1; k < stages; ++k) {
      const size_t target = k * n / stages;
      size_t best = 0;
      for (size_t b = start + 1; b < n; ++b) {  // stage starts at unit b: a cut after b - 1
        if (!units.cut_allowed[b - 1]) continue;
        const auto distance = [&](size_t x) { return x > target ? x - target : target - x; };
        if (best == 0 || distance(b) < distance(best)) best = b;
      }
      if (best == 0) throw std::runtime_error("no allowed cut left for stage " + std::to_string(k));
      ranges.push_back({start, best});
      start = best;
    }
    ranges.push_back({start, n});
    const auto wired = wire_program_stages(program, units, ranges);
    for (size_t s = 0; s < wired.size(); ++s) {
      std::ofstream out(std::string(argv[2]) + "/stage" + std::to_string(s) + ".json", std::ios::binary);
      out << stage_model_json(text.str(), program, wired[s], argv[1]);
      if (!out) throw std::runtime_error(std::string(argv[2]) + ": cannot be written");
      std::cout << "stage " << s << ": units [" << ranges[s].first << ", " << ranges[s].second << ")\n";
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
