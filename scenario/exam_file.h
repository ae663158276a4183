// Exam files: YAML mapped onto v1::ExamSpec by the scenario files' rules
// (every error names file:line:column and the field), then checked against
// the scenario catalogue the exam draws from.
//
//   id: infra-practical-2026q4
//   title: Distributed training operations, practical
//   time_limit_min: 120
//   pass_mark: 66              # percent of the exam's points
//   hints: {allowed: true, cost: 10}
//   retakes: 1
//   items:
//     - scenario: epoch-end-hang
//     - pool: [thermal-throttle, slow-local-disk]
//       points: 50
//     - skill: straggler rank identification
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/exam.pb.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::scenario {

// Parses and checks an exam file's text against `catalogue` (the scenarios
// the controller serves). A `skill:` item becomes the pool of the
// catalogue's scenarios that train it; every pool is sorted.
StatusOr<v1::ExamSpec> ParseExam(const std::string& yaml_text, const std::string& filename,
                                 const std::vector<v1::Scenario>& catalogue);
StatusOr<v1::ExamSpec> LoadExamFile(const std::string& path, const std::vector<v1::Scenario>& catalogue);

// The scenarios an item may draw (its one scenario, or its pool).
std::vector<std::string> ItemScenarios(const v1::ExamItem& item);
// An item's points (0 in the file means 100), and the exam's total.
int ItemPoints(const v1::ExamItem& item);
int ExamPoints(const v1::ExamSpec& exam);

}  // namespace firedrill::scenario
