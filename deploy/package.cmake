# The Debian package (CPack's DEB generator) and the system files a source install also gets.
#
#   cmake -S . -B build -G Ninja -DRJG_BUILD_TESTS=OFF && cmake --build build
#   (cd build && cpack)            # build/robot-jsonrpc-gateway_VERSION_amd64.deb
#
# What goes where (package: PREFIX is /usr; `cmake --install build --prefix PREFIX`: as given):
#
#   PREFIX/bin                 robot-jsonrpc-gateway, robot-jsonrpc-cli, the example workers
#                              (their own install() rules)
#   /lib/systemd/system        robot-jsonrpc-gateway.service and .socket (PREFIX/lib/systemd/system for
#                              a prefix other than /usr); their /usr/bin/ paths become PREFIX/bin/
#   PREFIX/lib/sysusers.d      robot-jsonrpc-gateway.conf: the user robot-gateway
#   PREFIX/lib/tmpfiles.d      robot-jsonrpc-gateway.conf: /run/robot-jsonrpc-gateway, /var/lib/...
#   PREFIX/share/doc/robot-jsonrpc-gateway
#                              README.md, doc/*.md and doc/status-page.png (the README's map); in the package
#                              also copyright and changelog.gz
#   PREFIX/share/man/man1, man8
#                              the programs' man pages (doc/man), gzipped
#   PREFIX/share/robot-jsonrpc-gateway/fork_server/*.py
#                              the fork server's template program (workers/fork_server, its own install()
#                              rule), which the gateway runs with a library's Python for fork_server = true
#   PREFIX/share/robot-jsonrpc-gateway/prometheus/robot-jsonrpc-gateway.rules.yml
#   PREFIX/share/robot-jsonrpc-gateway/grafana/robot-jsonrpc-gateway.json
#                              the alerting rules and the Grafana dashboard (deploy/prometheus,
#                              deploy/grafana), for the operator to load into their own
#                              Prometheus and Grafana (doc/operations.md)
#   /etc/robot-jsonrpc-gateway/gateway.toml
#                              deploy/gateway.toml (the package's conffile). Left out of a plain
#                              `cmake --install`; `--component config` writes it, never over an
#                              existing file.
#
# The unit files are rewritten at install time, not at configure time: cpack installs with the prefix
# /usr whatever CMAKE_INSTALL_PREFIX the build directory was configured with.

set(RJG_DEB_MAINTAINER "robot-jsonrpc-gateway maintainers <maintainers@users.noreply.a-seed-7f81e806.example>"
    CACHE STRING "Maintainer field of the Debian package (NAME <EMAIL>)")

set(_rjg_deploy "${PROJECT_SOURCE_DIR}/deploy")
set(_rjg_pkg "${PROJECT_BINARY_DIR}/package")
file(MAKE_DIRECTORY "${_rjg_pkg}/control" "${_rjg_pkg}/doc")

# --- Files installed by every install (package and source) -------------------------------------------

install(FILES "${PROJECT_SOURCE_DIR}/README.md" DESTINATION share/doc/robot-jsonrpc-gateway COMPONENT doc)
# The documentation the README maps, where its relative links point (doc/man is installed below).
file(GLOB _rjg_docs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/doc/*.md")
install(FILES ${_rjg_docs} "${PROJECT_SOURCE_DIR}/doc/status-page.png"
        DESTINATION share/doc/robot-jsonrpc-gateway/doc COMPONENT doc)
# Data for other programs, not documentation: a Prometheus server reads the rules, Grafana the dashboard.
install(FILES "${_rjg_deploy}/prometheus/robot-jsonrpc-gateway.rules.yml"
        DESTINATION share/robot-jsonrpc-gateway/prometheus COMPONENT monitoring)
install(FILES "${_rjg_deploy}/grafana/robot-jsonrpc-gateway.json"
        DESTINATION share/robot-jsonrpc-gateway/grafana COMPONENT monitoring)

# Man pages (doc/man): the version filled in and gzip -9n'd at configure time, as lintian wants them
# (configure_file makes an edited page re-run cmake). The two example workers share one page.
set(_rjg_man_pages robot-jsonrpc-gateway.8 robot-jsonrpc-cli.1 robot-example-calculator.1
    robot-classic-bridge.1 robot-mcp-worker.1 robot-ansible-worker.1)
file(MAKE_DIRECTORY "${_rjg_pkg}/man")
foreach(_rjg_page IN LISTS _rjg_man_pages)
  configure_file("${PROJECT_SOURCE_DIR}/doc/man/${_rjg_page}" "${_rjg_pkg}/man/${_rjg_page}" @ONLY)
  execute_process(COMMAND gzip -9nc "${_rjg_pkg}/man/${_rjg_page}" OUTPUT_FILE "${_rjg_pkg}/man/${_rjg_page}.gz"
                  COMMAND_ERROR_IS_FATAL ANY)
  string(REGEX REPLACE ".*\\." "" _rjg_section "${_rjg_page}")
  install(FILES "${_rjg_pkg}/man/${_rjg_page}.gz" DESTINATION "share/man/man${_rjg_section}" COMPONENT doc)
endforeach()
file(CREATE_LINK robot-example-calculator.1.gz "${_rjg_pkg}/man/robot-example-strings.1.gz" SYMBOLIC)
install(FILES "${_rjg_pkg}/man/robot-example-strings.1.gz" DESTINATION share/man/man1 COMPONENT doc)

# Runs at install time, where CMAKE_INSTALL_PREFIX is that install's prefix (and DESTDIR, if set, is
# prepended by file(INSTALL)). Only the Exec*= and Documentation= lines of the units change.
set(_rjg_code [==[
  set(_rjg_prefix "${CMAKE_INSTALL_PREFIX}")
  if(_rjg_prefix STREQUAL "/usr")
    # Debian 12 packages ship units in /lib/systemd/system (pkg-config --variable=systemdsystemunitdir systemd).
    set(_rjg_unitdir "/lib/systemd/system")
  else()
    # /usr/local/lib/systemd/system is on systemd's search path too (systemd-analyze unit-paths).
    set(_rjg_unitdir "${_rjg_prefix}/lib/systemd/system")
  endif()
  set(_rjg_units)
  foreach(_rjg_unit robot-jsonrpc-gateway.service robot-jsonrpc-gateway.socket)
    file(READ "@_rjg_deploy@/${_rjg_unit}" _rjg_text)
    string(REGEX REPLACE "(\n(Exec[A-Za-z]+|Documentation)=[-+!@:]*(file:)?)/usr/" "\\1${_rjg_prefix}/"
           _rjg_text "${_rjg_text}")
    file(WRITE "@_rjg_pkg@/units/${_rjg_unit}" "${_rjg_text}")
    list(APPEND _rjg_units "@_rjg_pkg@/units/${_rjg_unit}")
  endforeach()
  file(INSTALL DESTINATION "${_rjg_unitdir}" TYPE FILE FILES ${_rjg_units})
  file(INSTALL DESTINATION "${_rjg_prefix}/lib/sysusers.d" TYPE FILE
       RENAME robot-jsonrpc-gateway.conf FILES "@_rjg_deploy@/sysusers.conf")
  file(INSTALL DESTINATION "${_rjg_prefix}/lib/tmpfiles.d" TYPE FILE
       RENAME robot-jsonrpc-gateway.conf FILES "@_rjg_deploy@/tmpfiles.conf")
]==])
string(CONFIGURE "${_rjg_code}" _rjg_code @ONLY)
install(CODE "${_rjg_code}" COMPONENT systemd)

# --- Files only the package gets (EXCLUDE_FROM_ALL: cpack asks for these components by name) --------

# /etc/robot-jsonrpc-gateway/gateway.toml, with the example workers' paths of this prefix.
set(_rjg_code [==[
  set(_rjg_etc "$ENV{DESTDIR}/etc/robot-jsonrpc-gateway/gateway.toml")
  if(EXISTS "${_rjg_etc}")
    message(STATUS "Keeping: ${_rjg_etc} (exists; not overwritten)")
  else()
    file(READ "@_rjg_deploy@/gateway.toml" _rjg_text)
    string(REPLACE "\"/usr/bin/" "\"${CMAKE_INSTALL_PREFIX}/bin/" _rjg_text "${_rjg_text}")
    file(WRITE "@_rjg_pkg@/etc/gateway.toml" "${_rjg_text}")
    file(INSTALL DESTINATION "/etc/robot-jsonrpc-gateway" TYPE FILE FILES "@_rjg_pkg@/etc/gateway.toml")
  endif()
]==])
string(CONFIGURE "${_rjg_code}" _rjg_code @ONLY)
install(CODE "${_rjg_code}" COMPONENT config EXCLUDE_FROM_ALL)

# copyright and changelog.gz (a native package: the version has no Debian revision). The changelog's
# date honours SOURCE_DATE_EPOCH; gzip -9n: no name or time stamp in the header (lintian).
string(TIMESTAMP _rjg_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE "${_rjg_pkg}/doc/changelog"
"robot-jsonrpc-gateway (${PROJECT_VERSION}) unstable; urgency=medium

  * Built with CPack from the project's CMake build (deploy/package.cmake).
    The history of the project is its Git log.

 -- ${RJG_DEB_MAINTAINER}  ${_rjg_date}
")
execute_process(COMMAND gzip -9nc "${_rjg_pkg}/doc/changelog" OUTPUT_FILE "${_rjg_pkg}/doc/changelog.gz"
                COMMAND_ERROR_IS_FATAL ANY)
# The licence is the top-level LICENSE (Apache-2.0). Debian's base system ships its text as
# /usr/share/common-licenses/Apache-2.0, so the copyright file refers to it rather than repeat it
# (lintian: copyright-file-contains-full-apache-2-license). (2026: the year of the first commit.)
file(WRITE "${_rjg_pkg}/doc/copyright"
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: robot-jsonrpc-gateway
Upstream-Contact: ${RJG_DEB_MAINTAINER}
Comment: This package is built from the robot-jsonrpc-gateway source tree with CPack
 (deploy/package.cmake). The licence's full text is the file LICENSE at the top of that tree.

Files: *
Copyright: 2026 the robot-jsonrpc-gateway authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the \"License\");
 you may not use this file except in compliance with the License.
 You may obtain a copy of the License at
 .
 http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an \"AS IS\" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0
 can be found in \"/usr/share/common-licenses/Apache-2.0\".
")
install(FILES "${_rjg_pkg}/doc/copyright" "${_rjg_pkg}/doc/changelog.gz"
        DESTINATION share/doc/robot-jsonrpc-gateway COMPONENT deb EXCLUDE_FROM_ALL)

# --- Maintainer scripts and conffiles ----------------------------------------------------------------
# No debhelper. The postinst creates the user and the directories; it neither enables nor starts the
# service (the operator does, doc/operations.md "Install the Debian package"). On an upgrade it restarts the
# service only if it runs (try-restart: the drain lets the sessions finish first). Removal stops the
# service and the socket; purge also drops what `systemctl enable` made. The user, its home
# /var/lib/robot-jsonrpc-gateway and drop-ins under /etc/systemd/system are kept.
# deb-systemd-invoke (init-system-helpers, Essential) honours policy-rc.d, as in chroots and images.
file(WRITE "${_rjg_pkg}/control/conffiles" "/etc/robot-jsonrpc-gateway/gateway.toml\n")
file(WRITE "${_rjg_pkg}/control/postinst" [=[
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    systemd-sysusers robot-jsonrpc-gateway.conf
    systemd-tmpfiles --create robot-jsonrpc-gateway.conf
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
        if [ -n "$2" ]; then
            deb-systemd-invoke try-restart robot-jsonrpc-gateway.service
        fi
    fi
fi
exit 0
]=])
file(WRITE "${_rjg_pkg}/control/prerm" [=[
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    deb-systemd-invoke stop robot-jsonrpc-gateway.socket robot-jsonrpc-gateway.service || true
fi
exit 0
]=])
file(WRITE "${_rjg_pkg}/control/postrm" [=[
#!/bin/sh
set -e
if [ "$1" = purge ]; then
    rm -f /etc/systemd/system/multi-user.target.wants/robot-jsonrpc-gateway.service \
          /etc/systemd/system/sockets.target.wants/robot-jsonrpc-gateway.socket
    rm -rf /run/robot-jsonrpc-gateway
fi
if [ "$1" = remove ] || [ "$1" = purge ]; then
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
fi
exit 0
]=])

# --- CPack ---------------------------------------------------------------------------------------------

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME robot-jsonrpc-gateway)
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "${RJG_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "gateway server for Robot Framework's JSON-RPC remote protocol")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"Robot Framework suites connect to the gateway with the JsonRpcRemote client
library, as to the Python reference server. The gateway runs each imported
library in a worker process of its own (a Python interpreter in a virtualenv,
or any program that speaks the protocol on stdin and stdout), started on
demand or prewarmed, with pools, limits and a strict configuration check.

This package contains the gateway, the command-line client robot-jsonrpc-cli,
two example workers, and a hardened systemd service with an optional socket.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${RJG_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)            # robot-jsonrpc-gateway_VERSION_amd64.deb
# Library dependencies from dpkg-shlibdeps (dpkg-dev), plus what the scripts and the unit run:
# systemd-sysusers, systemd-tmpfiles and systemctl (systemd), /bin/kill of ExecReload= (procps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd, procps")
# What the adapter workers run: Ansible modules (robot-ansible-worker), MCP servers on Node.js
# (robot-mcp-worker, most of them). Neither is needed by the gateway itself.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "ansible-core, nodejs")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${_rjg_pkg}/control/conffiles;${_rjg_pkg}/control/postinst;${_rjg_pkg}/control/prerm;${_rjg_pkg}/control/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
# DESTDIR staging, so that the absolute destinations (/etc, /lib/systemd/system) land in the package.
# With DESTDIR staging the prefix cpack installs with is CPACK_INSTALL_PREFIX (else the build
# directory's CMAKE_INSTALL_PREFIX, /usr/local by default).
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Everything a plain install has ("ALL"), then the package-only components.
set(CPACK_INSTALL_CMAKE_PROJECTS
    "${PROJECT_BINARY_DIR};${PROJECT_NAME};ALL;/"
    "${PROJECT_BINARY_DIR};${PROJECT_NAME};config;/"
    "${PROJECT_BINARY_DIR};${PROJECT_NAME};deb;/")
set(CPACK_SOURCE_GENERATOR "")
include(CPack)
