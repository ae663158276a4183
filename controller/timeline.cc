#include "controller/timeline.h"

#include <algorithm>

#include "controller/store.h"

namespace firedrill::controller {

StatusOr<v1::TimelineItem> Timeline::Append(const std::string& session_id, int64_t unix_ms,
                                            const std::string& who, const std::string& role,
                                            const std::string& kind, const std::string& text) {
  v1::TimelineItem item;
  item.set_unix_ms(unix_ms);
  item.set_who(who);
  item.set_role(role);
  item.set_kind(kind);
  item.set_text(text);
  auto stored = store_->AppendTimeline(session_id, item);
  if (!stored.ok()) return stored.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t& newest = newest_[session_id];
    newest = std::max(newest, stored->seq());
  }
  cv_.notify_all();
  return stored;
}

StatusOr<std::vector<v1::TimelineItem>> Timeline::After(const std::string& session_id, int64_t after_seq) {
  return store_->LoadTimeline(session_id, after_seq);
}

void Timeline::WaitAfter(const std::string& session_id, int64_t after_seq,
                         std::chrono::milliseconds at_most) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, at_most, [&] {
    auto it = newest_.find(session_id);
    return it != newest_.end() && it->second > after_seq;
  });
}

}  // namespace firedrill::controller
