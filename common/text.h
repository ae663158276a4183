// Text for reports people read: escaping for Markdown and HTML, and times.
#pragma once

#include <cstdint>
#include <string>

namespace firedrill {

// `s` safe inside one line of Markdown (a table cell or a paragraph): the
// characters Markdown gives meaning to are backslash-escaped, line breaks
// become spaces.
std::string EscapeMarkdown(const std::string& s);
// `s` safe as HTML text or a quoted attribute value.
std::string EscapeHtml(const std::string& s);
// "2026-12-06 04:00:00Z" (UTC); "-" for 0 or less.
std::string UtcText(int64_t unix_ms);
// The time of day alone: "12:03:07 UTC" (an exam's deadline).
std::string UtcClockText(int64_t unix_ms);
// "1 h 02 min", "14 min 05 s", "42 s"; "-" for a negative duration.
std::string DurationText(int64_t ms);

}  // namespace firedrill
