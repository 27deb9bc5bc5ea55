# ctest Templates.RendererDigest: cmake/digest.cmake over a made-up template folder. The digest
# covers every renderer source (C++ and kernel files, in subfolders too) by path and content,
# nothing else, and not where the folder is.
#   cmake -DDIGEST=<cmake/digest.cmake> -DPATTERNS=<*.cpp,...> -DWORK=<scratch dir> -P digest_test.cmake
file(REMOVE_RECURSE "${WORK}")
set(dir "${WORK}/a/templates")
file(WRITE "${dir}/gemm.cpp" "int gemm;\n")
file(WRITE "${dir}/gemm.hpp" "#pragma once\n")
file(WRITE "${dir}/gemm/wgmma.cuh" "// @section wgmma\n// @end wgmma\n")
file(WRITE "${dir}/gemm/cpu.inc" "int cpu;\n")
file(WRITE "${dir}/gemm/standalone.h" "int k;\n")
file(WRITE "${dir}/prelude/rocm.hip" "int hip;\n")
file(WRITE "${dir}/notes.md" "not a renderer source\n")

function(digest_of dir out)
  execute_process(COMMAND ${CMAKE_COMMAND} -DOUT=${WORK}/digest.hpp -DNAME=D -DDIR=${dir} -DPATTERNS=${PATTERNS} -P ${DIGEST}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "digest.cmake failed: ${rc}")
  endif()
  file(READ ${WORK}/digest.hpp text)
  string(REGEX MATCH "#define D \"([0-9a-f]+)\"" _ "${text}")
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

function(expect what a op b)
  if(op STREQUAL "same" AND NOT a STREQUAL b)
    message(FATAL_ERROR "${what}: the digest changed (${a} -> ${b})")
  elseif(op STREQUAL "differs" AND a STREQUAL b)
    message(FATAL_ERROR "${what}: the digest stayed ${a}")
  endif()
endfunction()

digest_of("${dir}" d0)
string(LENGTH "${d0}" n)
if(NOT n EQUAL 64)
  message(FATAL_ERROR "no digest: '${d0}'")
endif()

file(COPY "${WORK}/a/templates" DESTINATION "${WORK}/elsewhere")
digest_of("${WORK}/elsewhere/templates" d)
expect("the same files in another folder" "${d0}" same "${d}")

file(WRITE "${dir}/notes.md" "edited\n")
digest_of("${dir}" d)
expect("a file that is no renderer source" "${d0}" same "${d}")

foreach(f gemm/wgmma.cuh gemm/cpu.inc gemm/standalone.h prelude/rocm.hip gemm.hpp gemm.cpp)
  file(READ "${dir}/${f}" old)
  file(APPEND "${dir}/${f}" " ")
  digest_of("${dir}" d)
  expect("a byte added to ${f}" "${d0}" differs "${d}")
  file(WRITE "${dir}/${f}" "${old}")
endforeach()
digest_of("${dir}" d)
expect("the files restored" "${d0}" same "${d}")

file(RENAME "${dir}/gemm/cpu.inc" "${dir}/prelude/cpu.inc")
digest_of("${dir}" d)
expect("a kernel file moved to another subfolder" "${d0}" differs "${d}")
file(RENAME "${dir}/prelude/cpu.inc" "${dir}/gemm/cpu.inc")

file(WRITE "${dir}/gemm/new.hip" "int added;\n")
digest_of("${dir}" d)
expect("a kernel file added" "${d0}" differs "${d}")
message(STATUS "renderer digest: ok")
