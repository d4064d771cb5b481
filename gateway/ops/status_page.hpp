// The admin endpoint's status page (GET /): the /status snapshot as one HTML5 page for a person at a
// browser. No script and no external asset: its one stylesheet comes from the admin endpoint itself, a
// strict Content-Security-Policy allows nothing else, and a <meta> refresh reloads it. Every text from
// a client or a worker (library and keyword names, peers, crash reasons) is escaped.
#pragma once

#include "gateway/fronts/http_server.hpp"

#include <boost/json/object.hpp>

#include <string>
#include <string_view>

namespace rjg::gateway::ops {

// Where the page's stylesheet and icon are served (the policy allows styles and images from the endpoint only).
inline constexpr std::string_view kStatusPageStylesheet = "/status.css";
inline constexpr std::string_view kStatusPageIcon = "/status.svg";
// What the page allows itself: its stylesheet, from where it came; nothing else loads, runs or submits.
inline constexpr std::string_view kStatusPagePolicy =
    "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";
// How often the page reloads itself, in seconds.
inline constexpr int kStatusPageRefreshSeconds = 10;

// The page for a snapshot as status_json (admin.hpp) renders it, with its security headers.
fronts::HttpResponse status_page_response(const boost::json::object& status);
fronts::HttpResponse status_page_stylesheet();
fronts::HttpResponse status_page_icon();
// The HTML alone.
std::string render_status_page(const boost::json::object& status);

}  // namespace rjg::gateway::ops
