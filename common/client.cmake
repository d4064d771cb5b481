# The blocking protocol client (command-line tool, integration tests, benchmarks). Included from
# common/CMakeLists.txt so that the gateway itself never links it.
add_library(rjg_client STATIC ${CMAKE_CURRENT_LIST_DIR}/client.cpp)
target_include_directories(rjg_client PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(rjg_client PUBLIC rjg_common rjg_asio Boost::json fmt::fmt)
