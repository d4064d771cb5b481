// The precompiled headers' own translation unit: CMake builds the header set once here (see
// precompiled.cmake), and every other target of the build reuses it.
