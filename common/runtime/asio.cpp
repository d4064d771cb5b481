// The one translation unit that compiles Asio's and Beast's non-template code (the scheduler, the
// reactor, socket operations, error categories, the HTTP parser), for every binary of the build:
// everywhere else BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION (rjg_asio in
// the top-level CMakeLists.txt) leave them out.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
