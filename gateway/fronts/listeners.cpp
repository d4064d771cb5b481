// Opening listeners: binding TCP addresses, Unix socket files made safely in place, and adopting the
// sockets systemd passed.
#include "gateway/fronts/listeners.hpp"

#include "gateway/fronts/addresses.hpp"
#include "gateway/ops/systemd.hpp"

#include "common/log.hpp"

#include <boost/asio/ip/v6_only.hpp>

#include <fmt/format.h>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace rjg::gateway::fronts {

namespace {

using tcp = asio::ip::tcp;
using unix_socket = Listener::unix_socket;

Listener open_unix(asio::io_context& io, const config::Gateway& gw, const config::ListenAddress& address) {
  const std::string& path = address.path;
  auto fail = [&](const std::string& why) {
    return std::runtime_error(fmt::format("cannot listen on {}: {}", address.text, why));
  };
  // A file left by a gateway that did not exit cleanly is replaced; a socket someone listens on, or a file
  // that is not a socket, is not.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) throw fail("the path exists and is not a socket; refusing to replace it");
    unix_socket::socket probe(io);
    boost::system::error_code ec;
    // Never blocking: a listener whose backlog is full (a stopped process) answers EAGAIN, and listens.
    probe.open(unix_socket(), ec);
    if (!ec) probe.non_blocking(true, ec);
    if (!ec) probe.connect(unix_socket::endpoint(path), ec);
    if (!ec || ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::in_progress)
      throw fail("another process listens on it (stop it, or choose another path)");
    if (ec != asio::error::connection_refused)
      throw fail(fmt::format("it exists and cannot be checked ({}); remove it if no gateway uses it", ec.message()));
    log::info("{}: replacing a stale socket file (nothing listens on it)", address.text);
    ::unlink(path.c_str());
  }
  gid_t group = static_cast<gid_t>(-1);
  if (!gw.unix_group.empty()) {
    if (std::all_of(gw.unix_group.begin(), gw.unix_group.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      group = static_cast<gid_t>(std::stoul(gw.unix_group));
    } else if (const ::group* g = ::getgrnam(gw.unix_group.c_str())) {
      group = g->gr_gid;
    } else {
      throw fail(fmt::format("unix_group '{}' does not exist on this host", gw.unix_group));
    }
  }
  // Bound in a private directory (0700, made beside the path) where nobody else can reach the file, given its
  // mode and group there, then linked into place: at the path there is never a file of the umask's mode, and
  // no window between bind() and chmod() in which a writer of the directory could swap the file under us.
  // (Short names: a socket's path has at most 107 bytes.)
  const auto slash = path.rfind('/');
  std::string private_dir =
      (slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash)) + "/.rjg-XXXXXX";
  if (private_dir.size() + 2 > sizeof(sockaddr_un::sun_path) - 1)
    throw fail(fmt::format("the gateway binds the socket in a private directory beside it first ({}/s), and that "
                           "path would be longer than a socket's {} bytes; choose a shorter directory",
                           private_dir, sizeof(sockaddr_un::sun_path) - 1));
  if (!::mkdtemp(private_dir.data()))
    throw fail(fmt::format("cannot make a private directory beside it ({}): the gateway needs to create files in "
                           "the socket's directory",
                           std::strerror(errno)));
  const std::string staged = private_dir + "/s";
  struct Cleanup {
    const std::string& dir;
    const std::string& file;
    ~Cleanup() {
      ::unlink(file.c_str());  // the path keeps the socket file's other link
      ::rmdir(dir.c_str());
    }
  } cleanup{private_dir, staged};
  auto acceptor = std::make_shared<unix_socket::acceptor>(io);
  boost::system::error_code ec;
  acceptor->open(unix_socket(), ec);
  if (!ec) acceptor->bind(unix_socket::endpoint(staged), ec);
  if (ec) throw fail(ec.message());
  if (::chmod(staged.c_str(), static_cast<mode_t>(gw.unix_mode)) != 0 ||
      (group != static_cast<gid_t>(-1) && ::chown(staged.c_str(), static_cast<uid_t>(-1), group) != 0)) {
    throw fail(fmt::format("cannot set the socket file's {} ({})", group != static_cast<gid_t>(-1) ? "mode or group" : "mode",
                           std::strerror(errno)));
  }
  // Mode and group are set before listen() and before the file appears at the path, so a connect finds it
  // only as it is meant. link(), not rename(): it never replaces a file that appeared there meanwhile.
  if (::link(staged.c_str(), path.c_str()) != 0)
    throw fail(errno == EEXIST ? std::string("a file appeared at the path while the gateway was binding; refusing to "
                                             "replace it")
                               : fmt::format("cannot put the socket file in place ({})", std::strerror(errno)));
  Listener listener{address.text, nullptr, acceptor, path, 0};
  if (::lstat(path.c_str(), &st) == 0) listener.inode = st.st_ino;
  acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    listener.close();
    throw fail(ec.message());
  }
  log::info("listening on {} (mode {:04o}{})", address.text, gw.unix_mode,
            gw.unix_group.empty() ? "" : ", group " + gw.unix_group);
  return listener;
}

}  // namespace

std::string Listener::text() const {
  boost::system::error_code ec;
  if (unix_acceptor) return "unix:" + path;
  return endpoint_text(acceptor->local_endpoint(ec));
}

void Listener::close() const {
  boost::system::error_code ignored;
  if (acceptor) acceptor->close(ignored);
  if (!unix_acceptor || !unix_acceptor->is_open()) return;
  unix_acceptor->close(ignored);
  // Only the file bound here: a gateway started since may have replaced it.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && st.st_ino == inode && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
}

std::vector<Listener> open_listen_entry(asio::io_context& io, const config::Gateway& gw,
                                        const config::ListenAddress& address, ops::PassedSockets* passed,
                                        const std::vector<std::string>& named) {
  std::vector<Listener> opened;
  if (address.kind == config::ListenAddress::Kind::unix_socket) {
    opened.push_back(open_unix(io, gw, address));
    return opened;
  }
  if (address.kind == config::ListenAddress::Kind::systemd) {
    if (!passed)
      throw std::runtime_error(fmt::format("listen entry \"{}\": systemd passes sockets only when it starts the "
                                           "gateway; restart it to listen there",
                                           address.text));
    for (int fd : passed->take(address, named)) {
      // The socket is bound and listening already (PassedSockets checked): it only needs its protocol.
      sockaddr_storage bound{};
      socklen_t size = sizeof bound;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
      auto acceptor = std::make_shared<tcp::acceptor>(io);
      boost::system::error_code ec;
      acceptor->assign(bound.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
      if (ec) throw std::runtime_error(fmt::format("listen entry \"{}\": cannot use fd {}: {}", address.text, fd, ec.message()));
      log::info("listening on {} (socket passed by systemd, fd {}, for \"{}\")",
                endpoint_text(acceptor->local_endpoint(ec)), fd, address.text);
      opened.push_back({address.text, std::move(acceptor), nullptr, {}, 0});
    }
    return opened;
  }
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(address.host, std::to_string(address.port),
                                  tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw std::runtime_error(fmt::format("cannot resolve listen address {}: {}", address.text, ec.message()));
  for (const auto& entry : results) {
    auto acceptor = std::make_shared<tcp::acceptor>(io);
    auto endpoint = entry.endpoint();
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && endpoint.protocol() == tcp::v6()) acceptor->set_option(asio::ip::v6_only(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      // What this entry opened so far closes with `opened`.
      throw std::runtime_error(fmt::format("cannot listen on {} ({}:{}): {}", address.text,
                                           endpoint.address().to_string(), endpoint.port(), ec.message()));
    }
    log::info("listening on {}", endpoint_text(acceptor->local_endpoint(ec)));
    opened.push_back({address.text, std::move(acceptor), nullptr, {}, 0});
  }
  return opened;
}

std::vector<std::string> named_sockets(const config::Config& config) {
  std::vector<std::string> named;
  for (const auto* listen : {&config.gateway.listen, &config.admin.listen, &config.classic.listen})
    for (const auto& address : *listen)
      if (!address.fd_name.empty()) named.push_back(address.fd_name);
  return named;
}

}  // namespace rjg::gateway::fronts
