// The precompiled header's own text (CMake writes cmake_pch.hxx from target_precompile_headers),
// compiled with -E -P under the PCH's flags: its output is what the .gch is made of
// (cmake/pch_sum.cmake hashes it for ccache).
#include "cmake_pch.hxx"
