# Writes OUT (a header defining RLX_GIT_COMMIT) from the git checkout at SOURCE_DIR; run
# at every build by the rlx_git_commit target. The file is rewritten only when the text
# changes, so cmd_bench.cpp recompiles only when the commit (or its dirty mark) does.
execute_process(COMMAND git describe --always --dirty --abbrev=7
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT commit)
  set(commit unknown)
endif()
set(text "// Generated at build time by tools/git_commit.cmake.\n#define RLX_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
