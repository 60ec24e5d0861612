# Writes the version header with the current git commit; run at every build (not only at configure
# time) so `cpbench --version` and reports never carry a stale commit. Rewrites only on change.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT COMMIT)
  set(COMMIT unknown)
elseif(DIRTY)
  set(COMMIT "${COMMIT}-dirty")
endif()
set(TEXT "#pragma once\n// Generated at build time by cmake/version.cmake.\nnamespace cpbench {\ninline constexpr const char* kVersion = \"${VERSION}\";\ninline constexpr const char* kGitCommit = \"${COMMIT}\";\n}  // namespace cpbench\n")
if(EXISTS ${OUT})
  file(READ ${OUT} OLD)
endif()
if(NOT "${OLD}" STREQUAL "${TEXT}")
  file(WRITE ${OUT} "${TEXT}")
endif()
