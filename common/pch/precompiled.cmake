# Precompiled headers: Boost.Asio, Boost.JSON, fmt and the standard library (and GoogleTest for the
# tests) are parsed once per build instead of once per file. Nearly every file includes some of them,
# and parsing them is about a fifth of each file's compile time; the test command compiles the tree
# three times (plain, ASan/UBSan with the fuzzers, TSan), so this is minutes of CI time.
#
# Two donors, rjg_pch and rjg_test_pch; every other target of the build reuses one of them
# (REUSE_FROM). GCC takes a precompiled header only where the macros it depends on are defined the
# same way, so every target also gets the donors' definitions (rjg_pch_flags); -Winvalid-pch makes a
# refused header a warning, not a silent slowdown. RJG_PCH=OFF builds without them.

add_library(rjg_pch_flags INTERFACE)
target_link_libraries(rjg_pch_flags INTERFACE rjg_asio Boost::json fmt::fmt)
target_compile_options(rjg_pch_flags INTERFACE -Winvalid-pch)

# Only headers the project's files include anyway (the ones most of them include): a header in the
# precompiled set is seen by every file, and some change what code means where they are seen (all of
# <boost/asio.hpp> would bring use_future.hpp, which makes a std::packaged_task handed to asio::post a
# completion token).
set(RJG_PCH_HEADERS
  <algorithm> <array> <chrono> <cstddef> <cstdint> <filesystem> <functional> <map> <memory>
  <optional> <set> <string> <string_view> <unordered_map> <utility> <variant> <vector>
  <boost/asio/any_io_executor.hpp> <boost/asio/as_tuple.hpp> <boost/asio/awaitable.hpp> <boost/asio/buffer.hpp>
  <boost/asio/co_spawn.hpp> <boost/asio/detached.hpp> <boost/asio/executor_work_guard.hpp>
  <boost/asio/io_context.hpp> <boost/asio/ip/tcp.hpp> <boost/asio/post.hpp> <boost/asio/read.hpp>
  <boost/asio/steady_timer.hpp> <boost/asio/use_awaitable.hpp> <boost/asio/write.hpp>
  <boost/json.hpp> <fmt/format.h>)

add_library(rjg_pch STATIC ${CMAKE_CURRENT_LIST_DIR}/pch.cpp)
target_link_libraries(rjg_pch PUBLIC rjg_pch_flags)
target_precompile_headers(rjg_pch PRIVATE ${RJG_PCH_HEADERS})

if(RJG_BUILD_TESTS)
  find_package(GTest REQUIRED)  # its imported targets are seen only where it is found
  add_library(rjg_test_pch STATIC ${CMAKE_CURRENT_LIST_DIR}/pch.cpp)
  target_link_libraries(rjg_test_pch PUBLIC rjg_pch_flags GTest::gtest)
  target_compile_options(rjg_test_pch PRIVATE ${RJG_TEST_OPTIMIZATION})
  target_precompile_headers(rjg_test_pch PRIVATE ${RJG_PCH_HEADERS} <gtest/gtest.h>)
endif()

function(rjg_collect_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    rjg_collect_targets(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Called once, after every target is defined.
function(rjg_precompile_headers)
  rjg_collect_targets(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    # rjg_asio is one file that compiles Asio's own sources: nothing to share with it.
    if(NOT type MATCHES "^(STATIC_LIBRARY|EXECUTABLE|OBJECT_LIBRARY)$" OR target MATCHES "^rjg_((test_)?pch|asio)$")
      continue()
    endif()
    get_target_property(dir ${target} SOURCE_DIR)
    if(dir MATCHES "^${PROJECT_SOURCE_DIR}/tests/fuzz")
      continue()
    endif()
    # clang refuses a precompiled header made without libFuzzer's coverage in a file compiled with it
    # (RJG_FUZZ instruments the libraries the fuzzers drive).
    get_target_property(options ${target} COMPILE_OPTIONS)
    if(options MATCHES "fuzzer-no-link")
      continue()
    endif()
    set(donor rjg_pch)
    if(dir MATCHES "^${PROJECT_SOURCE_DIR}/tests/")
      set(donor rjg_test_pch)
    endif()
    target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:rjg_pch_flags>)
    if(donor STREQUAL "rjg_test_pch")
      target_link_libraries(${target} PRIVATE GTest::gtest)
    endif()
    target_precompile_headers(${target} REUSE_FROM ${donor})
  endforeach()
endfunction()
