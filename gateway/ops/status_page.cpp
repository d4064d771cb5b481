#include "gateway/ops/status_page.hpp"

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <vector>

namespace rjg::gateway::ops {
namespace json = boost::json;

namespace {

// Long tables stay readable: rows sorted so that what needs a look comes first, and a totals row that
// says how many there are (sessions may number in the hundreds).
constexpr std::string_view kStylesheet = R"(:root { color-scheme: light; font: 14px/1.4 system-ui, sans-serif; }
body { margin: 1em 2em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.4em; margin: 0 0 .3em; }
h2 { font-size: 1.15em; margin: 1.4em 0 .4em; }
p.note { color: #555; margin: .2em 0; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: .15em 1.2em; margin: .6em 0; }
dl.facts dt { color: #555; }
dl.facts dd { margin: 0; }
table { border-collapse: collapse; margin: .3em 0 1em; }
th, td { padding: .15em .7em; border-bottom: 1px solid #e3e3e6; text-align: left; vertical-align: top; }
th { background: #f3f3f5; position: sticky; top: 0; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.total td { font-weight: 600; border-top: 2px solid #c7c7cc; background: #fafafa; }
tbody tr:nth-child(even) { background: #fbfbfd; }
.bad { color: #b00020; font-weight: 600; }
.warn { color: #8a5a00; font-weight: 600; }
.ok { color: #1b6e20; }
.idle { color: #777; }
code { font: 13px ui-monospace, monospace; }
details > summary { cursor: pointer; font-weight: 600; margin: .3em 0; }
)";

// Text made safe inside an element or a quoted attribute: & < > " ' escaped, control characters and
// stray bytes shown as U+FFFD, at most `max_bytes` (cut at a character boundary, with an ellipsis).
std::string escape(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t taken = 0;
  for (std::size_t i = 0; i < text.size();) {
    // One UTF-8 sequence at a time, so a cut never splits a character.
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 1;
    n = std::min(n, text.size() - i);
    if (taken + n > max_bytes) {
      out += "\xe2\x80\xa6";  // …
      break;
    }
    taken += n;
    if (n == 1) {
      switch (const char c = text[i]) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default:
          // Controls and stray bytes of broken UTF-8 show as the replacement character.
          if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) out += "\xef\xbf\xbd";
          else out += c;
      }
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string_view str(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}
double num(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  if (!v) return 0;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  return 0;
}
bool flag(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_bool() && v->get_bool();
}
const json::array& list(const json::object& o, std::string_view key) {
  static const json::array kEmpty;
  const auto* v = o.if_contains(key);
  return v && v->is_array() ? v->get_array() : kEmpty;
}
const json::object& obj(const json::value& v) {
  static const json::object kEmpty;
  return v.is_object() ? v.get_object() : kEmpty;
}

// "45 s", "12 min 03 s", "3 h 07 min", "2 d 04 h": as precise as a glance needs.
std::string duration(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  if (seconds < 10) return fmt::format("{:.1f} s", seconds);
  const auto s = static_cast<std::uint64_t>(seconds);
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {:02} s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{} h {:02} min", s / 3600, s % 3600 / 60);
  return fmt::format("{} d {:02} h", s / 86400, s % 86400 / 3600);
}

std::string bytes(double n) {
  if (n <= 0) return "0";
  constexpr std::array<std::string_view, 4> units = {"B", "KiB", "MiB", "GiB"};
  std::size_t unit = 0;
  while (n >= 1024 && unit + 1 < units.size()) n /= 1024, ++unit;
  return unit == 0 ? fmt::format("{:.0f} B", n) : fmt::format("{:.1f} {}", n, units[unit]);
}

std::string count(double n) { return fmt::format("{:.0f}", n); }

class Page {
 public:
  Page& raw(std::string_view html) {
    out_ += html;
    return *this;
  }
  Page& text(std::string_view text, std::size_t max_bytes = 200) {
    out_ += escape(text, max_bytes);
    return *this;
  }
  // A table's head: column names; a leading '#' marks a numeric (right-aligned) column.
  void head(std::string_view id, std::initializer_list<std::string_view> columns) {
    out_ += fmt::format("<table id=\"{}\"><thead><tr>", id);
    for (auto c : columns) {
      const bool numeric = c.starts_with('#');
      out_ += fmt::format("<th{}>{}</th>", numeric ? " class=\"n\"" : "", escape(numeric ? c.substr(1) : c, 100));
    }
    out_ += "</tr></thead><tbody>\n";
  }
  void cell(std::string_view escaped_html, bool numeric = false) {
    out_ += numeric ? "<td class=\"n\">" : "<td>";
    out_ += escaped_html;
    out_ += "</td>";
  }
  void end_table() { out_ += "</tbody></table>\n"; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string span(std::string_view css_class, std::string_view escaped_html) {
  return fmt::format("<span class=\"{}\">{}</span>", css_class, escaped_html);
}

void gateway_facts(Page& page, const json::object& status) {
  static const json::value kNone;
  const auto* reload_value = status.if_contains("reload");
  const auto& reload = obj(reload_value ? *reload_value : kNone);
  const auto sessions = list(status, "sessions").size();
  std::size_t workers = 0;
  for (const auto& l : list(status, "libraries")) workers += list(obj(l), "workers").size();
  const auto max_sessions = num(status, "max_sessions");
  const auto max_workers = num(status, "max_workers");

  page.raw("<dl class=\"facts\">");
  page.raw("<dt>State</dt><dd>")
      .raw(flag(status, "draining") ? span("warn", "draining: no new sessions")
           : flag(status, "ready")  ? span("ok", "ready")
                                    : span("warn", "starting"))
      .raw(" &mdash; ")
      .text(str(status, "status"), 400)
      .raw("</dd>");
  page.raw("<dt>Uptime</dt><dd>").text(duration(num(status, "uptime_seconds"))).raw("</dd>");
  page.raw("<dt>Configuration</dt><dd><code>")
      .text(str(status, "config"), 400)
      .raw(fmt::format("</code>, generation {}</dd>", count(num(status, "config_generation"))));
  const auto last = str(reload, "last");
  page.raw("<dt>Last reload</dt><dd>");
  if (last == "failed")
    page.raw(span("bad", "failed")).raw(": ").text(str(reload, "problem"), 400);
  else if (last == "applied")
    page.raw(span("ok", "applied"));
  else
    page.raw("none since start");
  page.raw(fmt::format(" ({} applied, {} failed)</dd>", count(num(reload, "applied")), count(num(reload, "failed"))));
  page.raw(fmt::format("<dt>Sessions</dt><dd>{}{}</dd>", sessions,
                       max_sessions > 0 ? fmt::format(" of {} (max_sessions)", count(max_sessions)) : ""));
  page.raw(fmt::format("<dt>Workers</dt><dd>{}{}</dd>", workers,
                       max_workers > 0 ? fmt::format(" of {} (max_workers)", count(max_workers)) : ""));
  page.raw(fmt::format("<dt>Requests in flight</dt><dd>{}</dd>", count(num(status, "requests_in_flight"))));
  page.raw("</dl>\n");
}

void libraries_table(Page& page, const json::object& status) {
  // Per library: sessions holding it and keywords running in it, counted from the sessions.
  std::map<std::string, std::pair<std::size_t, std::size_t>, std::less<>> use;
  for (const auto& s : list(status, "sessions")) {
    for (const auto& l : list(obj(s), "libraries"))
      if (l.is_string()) ++use[std::string(l.get_string())].first;
    for (const auto& k : list(obj(s), "keywords_running")) ++use[std::string(str(obj(k), "library"))].second;
  }
  std::vector<const json::object*> rows;
  for (const auto& l : list(status, "libraries")) rows.push_back(&obj(l));
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return str(*a, "name") < str(*b, "name"); });

  page.raw(fmt::format("<h2 id=\"libraries\">Libraries ({})</h2>\n", rows.size()));
  page.head("libraries-table", {"Library", "Isolation", "#Sessions", "#Live", "#Idle", "#Busy", "#Starting", "#Prewarmed",
             "#Prewarm / max", "#Imports waiting", "#Keywords running", "#RSS", "Backoff", "Last crash"});
  double sessions = 0, live = 0, idle = 0, busy = 0, starting = 0, prewarmed = 0, waiting = 0, running = 0, rss = 0;
  for (const auto* l : rows) {
    double n_idle = 0, n_busy = 0, n_prewarmed = 0;
    const auto& workers = list(*l, "workers");
    for (const auto& w : workers) {
      const auto state = str(obj(w), "state");
      n_idle += state == "idle";
      n_busy += state == "busy";
      n_prewarmed += flag(obj(w), "prewarmed");
    }
    const auto name = str(*l, "name");
    // Sessions name a library as they imported it: a glob entry's pool serves the names its workers show.
    std::vector<std::string_view> names{name};
    for (const auto& w : workers)
      if (auto serves = str(obj(w), "serves"); !serves.empty() && std::find(names.begin(), names.end(), serves) == names.end())
        names.push_back(serves);
    std::size_t holding = 0, keywords = 0;
    for (auto n : names)
      if (auto it = use.find(n); it != use.end()) holding += it->second.first, keywords += it->second.second;
    page.raw("<tr>");
    page.cell(escape(name, 200) + (flag(*l, "retired") ? " " + span("idle", "(retired by a reload)") : "") +
              (l->contains("upstream") ? " <span class=\"idle\">&rarr; " + escape(str(*l, "upstream"), 200) + "</span>"
                                       : ""));
    page.cell(escape(str(*l, "isolation"), 20));
    page.cell(count(static_cast<double>(holding)), true);
    page.cell(count(static_cast<double>(workers.size())), true);
    page.cell(count(n_idle), true);
    page.cell(count(n_busy), true);
    page.cell(count(num(*l, "workers_starting")), true);
    page.cell(count(n_prewarmed), true);
    page.cell(l->contains("max_workers")
                  ? fmt::format("{} / {}", count(num(*l, "prewarm")),
                                num(*l, "max_workers") > 0 ? count(num(*l, "max_workers")) : "&ndash;")
                  : "",
              true);
    const auto w = num(*l, "imports_waiting");
    page.cell(w > 0 ? span("warn", count(w)) : count(w), true);
    page.cell(count(static_cast<double>(keywords)), true);
    page.cell(bytes(num(*l, "rss_bytes")), true);
    std::string health = flag(*l, "backing_off") ? span("bad", fmt::format("backing off ({} failures in a row)",
                                                                           count(num(*l, "failures_in_a_row"))))
                                                  : "";
    // fork_server = true: where its workers come from.
    if (const auto* fork = l->if_contains("fork_server"); fork && fork->is_object()) {
      const auto& f = fork->get_object();
      const auto state = str(f, "state");
      health += (health.empty() ? "" : " ") +
                (state == "ready"  ? span("idle", fmt::format("fork server pid {} ready", count(num(f, "pid"))))
                 : state == "down" ? span("warn", "fork server down: " + escape(str(f, "problem"), 300) + "; plain starts")
                                   : span("idle", "fork server " + escape(state, 20)));
    }
    page.cell(health);
    if (const auto* crash = l->if_contains("last_crash"); crash && crash->is_object())
      page.cell(escape(str(crash->get_object(), "what"), 300) +
                span("idle", fmt::format(" ({} ago)", duration(num(crash->get_object(), "seconds_ago")))));
    else
      page.cell("");
    page.raw("</tr>\n");
    sessions += static_cast<double>(holding), live += static_cast<double>(workers.size()), idle += n_idle, busy += n_busy;
    starting += num(*l, "workers_starting"), prewarmed += n_prewarmed, waiting += w;
    running += static_cast<double>(keywords), rss += num(*l, "rss_bytes");
  }
  page.raw("<tr class=\"total\">");
  page.cell(fmt::format("Total: {} libraries", rows.size()));
  page.cell("");
  for (double v : {sessions, live, idle, busy, starting, prewarmed}) page.cell(count(v), true);
  page.cell("", true);
  for (double v : {waiting, running}) page.cell(count(v), true);
  page.cell(bytes(rss), true);
  page.cell("");
  page.cell("");
  page.raw("</tr>\n");
  page.end_table();
}

void sessions_table(Page& page, const json::object& status) {
  struct Row {
    const json::object* session;
    double longest;  // the keyword running longest; -1: none
  };
  std::vector<Row> rows;
  std::size_t running = 0;
  for (const auto& s : list(status, "sessions")) {
    double longest = -1;
    for (const auto& k : list(obj(s), "keywords_running")) longest = std::max(longest, num(obj(k), "seconds")), ++running;
    rows.push_back({&obj(s), longest});
  }
  // The keyword running longest first (a stuck one is what an operator looks for), then the oldest sessions.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.longest != b.longest) return a.longest > b.longest;
    if (num(*a.session, "age_seconds") != num(*b.session, "age_seconds"))
      return num(*a.session, "age_seconds") > num(*b.session, "age_seconds");
    return num(*a.session, "id") < num(*b.session, "id");
  });
  page.raw(fmt::format("<h2 id=\"sessions\">Sessions ({}, {} running a keyword)</h2>\n", rows.size(), running));
  page.raw("<p class=\"note\">The keyword running longest first, then the oldest sessions.</p>\n");
  page.head("sessions-table", {"#Session", "Client", "Connected for", "Libraries", "Keyword running", "#For"});
  std::size_t imports = 0;
  for (const auto& row : rows) {
    const auto& s = *row.session;
    imports += static_cast<std::size_t>(num(s, "imports"));
    std::string libraries;
    for (const auto& l : list(s, "libraries"))
      if (l.is_string()) libraries += (libraries.empty() ? "" : ", ") + escape(l.get_string(), 200);
    std::string keywords, times;
    for (const auto& k : list(s, "keywords_running")) {
      const auto& kw = obj(k);
      keywords += fmt::format("{}<code>{}</code> <span class=\"idle\">({})</span>", keywords.empty() ? "" : "<br>",
                              escape(str(kw, "keyword"), 200), escape(str(kw, "library"), 200));
      times += (times.empty() ? "" : "<br>") + duration(num(kw, "seconds"));
    }
    page.raw("<tr>");
    page.cell(count(num(s, "id")), true);
    page.cell(escape(str(s, "peer"), 200));
    page.cell(duration(num(s, "age_seconds")));
    page.cell(libraries.empty() ? span("idle", "none") : libraries);
    page.cell(keywords.empty() ? span("idle", "idle") : keywords);
    page.cell(times, true);
    page.raw("</tr>\n");
  }
  page.raw("<tr class=\"total\">");
  page.cell(fmt::format("{}", rows.size()), true);
  page.cell(fmt::format("Total: {} sessions, {} imports held", rows.size(), imports));
  page.cell("");
  page.cell("");
  page.cell(fmt::format("{} running", running));
  page.cell("");
  page.raw("</tr>\n");
  page.end_table();
}

void workers_table(Page& page, const json::object& status) {
  struct Row {
    std::string_view library;
    const json::object* worker;
  };
  std::vector<Row> rows;
  for (const auto& l : list(status, "libraries"))
    for (const auto& w : list(obj(l), "workers")) rows.push_back({str(obj(l), "name"), &obj(w)});
  // By library, then the oldest worker first.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.library != b.library) return a.library < b.library;
    return num(*a.worker, "age_seconds") > num(*b.worker, "age_seconds");
  });
  page.raw(fmt::format("<h2 id=\"workers\">Workers ({})</h2>\n", rows.size()));
  page.head("workers-table", {"#PID", "Library", "State", "#RSS", "#Keywords served", "#Imports", "#Age"});
  double rss = 0, keywords = 0, imports = 0;
  for (const auto& [library, w] : rows) {
    page.raw("<tr>");
    page.cell(w->contains("upstream") ? span("idle", "upstream") : count(num(*w, "pid")), true);
    std::string name = escape(library, 200);
    if (auto serves = str(*w, "serves"); !serves.empty()) name += " <span class=\"idle\">serving " + escape(serves, 200) + "</span>";
    if (w->contains("upstream")) name += " <span class=\"idle\">&rarr; " + escape(str(*w, "upstream"), 200) + "</span>";
    page.cell(name);
    const auto state = str(*w, "state");
    std::string shown = state == "busy"       ? span("warn", "busy")
                        : state == "draining" ? span("idle", "draining")
                                              : escape(state, 20);
    if (flag(*w, "prewarmed")) shown += " " + span("idle", "(prewarmed)");
    page.cell(shown);
    page.cell(bytes(num(*w, "rss_bytes")), true);
    page.cell(count(num(*w, "keywords")), true);
    page.cell(count(num(*w, "imports")), true);
    page.cell(duration(num(*w, "age_seconds")), true);
    page.raw("</tr>\n");
    rss += num(*w, "rss_bytes"), keywords += num(*w, "keywords"), imports += num(*w, "imports");
  }
  page.raw("<tr class=\"total\">");
  page.cell(count(static_cast<double>(rows.size())), true);
  page.cell(fmt::format("Total: {} workers", rows.size()));
  page.cell("");
  page.cell(bytes(rss), true);
  page.cell(count(keywords), true);
  page.cell(count(imports), true);
  page.cell("", true);
  page.raw("</tr>\n");
  page.end_table();
}

void classic_table(Page& page, const json::object& status) {
  const auto* classic = status.if_contains("classic");
  if (!classic || !classic->is_object()) return;
  const auto& c = classic->get_object();
  page.raw("<h2 id=\"classic\">Classic Remote front</h2>\n");
  page.raw(fmt::format("<p class=\"note\">{} connections, {} calls running, {} imports held.</p>\n",
                       count(num(c, "connections")), count(num(c, "calls_running")), count(num(c, "imports"))));
  std::vector<const json::object*> rows;
  for (const auto& l : list(c, "libraries")) rows.push_back(&obj(l));
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return str(*a, "library") < str(*b, "library"); });
  page.head("classic-table", {"Library", "#Instances", "#Imported", "#Busy", "#Calls waiting"});
  double instances = 0, imported = 0, busy = 0, waiting = 0;
  for (const auto* l : rows) {
    page.raw("<tr>");
    page.cell(escape(str(*l, "library"), 200));
    page.cell(count(num(*l, "instances")), true);
    page.cell(count(num(*l, "imported")), true);
    page.cell(count(num(*l, "busy")), true);
    page.cell(num(*l, "calls_waiting") > 0 ? span("warn", count(num(*l, "calls_waiting"))) : "0", true);
    page.raw("</tr>\n");
    instances += num(*l, "instances"), imported += num(*l, "imported"), busy += num(*l, "busy");
    waiting += num(*l, "calls_waiting");
  }
  page.raw("<tr class=\"total\">");
  page.cell(fmt::format("Total: {} libraries", rows.size()));
  for (double v : {instances, imported, busy, waiting}) page.cell(count(v), true);
  page.raw("</tr>\n");
  page.end_table();
}

void upstreams_table(Page& page, const json::object& status) {
  std::vector<const json::object*> rows;
  for (const auto& l : list(status, "libraries"))
    if (obj(l).contains("upstream")) rows.push_back(&obj(l));
  if (rows.empty()) return;
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return str(*a, "name") < str(*b, "name"); });
  page.raw("<h2 id=\"upstreams\">Upstreams</h2>\n");
  page.head("upstreams-table", {"Library", "Upstream", "#Connections or bridges", "#Keywords served"});
  for (const auto* l : rows) {
    double keywords = 0;
    for (const auto& w : list(*l, "workers")) keywords += num(obj(w), "keywords");
    page.raw("<tr>");
    page.cell(escape(str(*l, "name"), 200));
    page.cell("<code>" + escape(str(*l, "upstream"), 300) + "</code>");
    page.cell(count(static_cast<double>(list(*l, "workers").size())), true);
    page.cell(count(keywords), true);
    page.raw("</tr>\n");
  }
  page.end_table();
}

}  // namespace

std::string render_status_page(const json::object& status) {
  Page page;
  page.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
  page.raw(fmt::format("<meta http-equiv=\"refresh\" content=\"{}\">\n", kStatusPageRefreshSeconds));
  page.raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
  page.raw("<title>robot-jsonrpc-gateway ").text(str(status, "version"), 60).raw(" status</title>\n");
  page.raw(fmt::format("<link rel=\"stylesheet\" href=\"{}\">\n", kStatusPageStylesheet));
  // An icon of its own, or the browser asks for /favicon.ico and logs the 404.
  page.raw(fmt::format("<link rel=\"icon\" href=\"{}\" type=\"image/svg+xml\">\n", kStatusPageIcon));
  page.raw("</head><body>\n");
  page.raw("<h1>robot-jsonrpc-gateway ").text(str(status, "version"), 60).raw("</h1>\n");
  page.raw(fmt::format("<p class=\"note\">Reloads every {} s. The same as JSON: <a href=\"/status\">/status</a>; "
                       "counters for Prometheus: <a href=\"/metrics\">/metrics</a>.</p>\n",
                       kStatusPageRefreshSeconds));
  gateway_facts(page, status);
  libraries_table(page, status);
  sessions_table(page, status);
  workers_table(page, status);
  upstreams_table(page, status);
  classic_table(page, status);
  page.raw("</body></html>\n");
  return page.take();
}

fronts::HttpResponse status_page_response(const json::object& status) {
  return fronts::HttpResponse{200,
                      "text/html; charset=utf-8",
                      render_status_page(status),
                      {{"Content-Security-Policy", std::string(kStatusPagePolicy)},
                       {"X-Content-Type-Options", "nosniff"},
                       {"Referrer-Policy", "no-referrer"},
                       {"X-Frame-Options", "DENY"}}};
}

fronts::HttpResponse status_page_icon() {
  return fronts::HttpResponse{200,
                      "image/svg+xml",
                      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\"><circle cx=\"8\" cy=\"8\" "
                      "r=\"7\" fill=\"#1b6e20\"/></svg>\n",
                      {{"X-Content-Type-Options", "nosniff"}}};
}

fronts::HttpResponse status_page_stylesheet() {
  return fronts::HttpResponse{200, "text/css; charset=utf-8", std::string(kStylesheet), {{"X-Content-Type-Options", "nosniff"}}};
}

}  // namespace rjg::gateway::ops
