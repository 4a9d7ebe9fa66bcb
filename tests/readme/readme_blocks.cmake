# The README's code, compiled (ctest test_readme): every ```cpp block of README.md and of
# docs/coming-from-libtorch.md becomes a program under the build folder, built with the rest of
# the tree, so a change of the API that the front page does not follow breaks the build. A
# block with its own main() is compiled as it stands and run by test_readme; any other block is
# a fragment of statements, compiled inside a main() after the umbrella headers and
# `using namespace adjoint;` (and not run: fragments may name files that are not there).
# Errors point at the markdown file's own lines (#line). Editing either page reconfigures.
set(ADJOINT_DOC_PROGRAMS "")
function(adjoint_doc_blocks source prefix)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source})
  file(READ ${source} text)
  set(fence "```cpp\n")
  string(LENGTH "${fence}" fence_len)
  set(consumed 0)  # characters of the file before `text`
  set(n 0)
  set(programs "")
  while(TRUE)
    string(FIND "${text}" "${fence}" start)
    if(start EQUAL -1)
      break()
    endif()
    math(EXPR start "${start} + ${fence_len}")
    math(EXPR body_at "${consumed} + ${start}")
    string(SUBSTRING "${text}" ${start} -1 text)
    math(EXPR consumed "${body_at}")
    string(FIND "${text}" "```" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${source}: a ```cpp block is not closed")
    endif()
    string(SUBSTRING "${text}" 0 ${end} code)
    string(SUBSTRING "${text}" ${end} -1 text)
    math(EXPR consumed "${consumed} + ${end}")
    # The block's first line in the file: one plus the newlines before it.
    file(READ ${source} whole LIMIT ${body_at})
    string(REGEX MATCHALL "\n" newlines "${whole}")
    list(LENGTH newlines line)
    math(EXPR line "${line} + 1")
    math(EXPR n "${n} + 1")
    set(name ${prefix}_${n})
    string(FIND "${code}" "int main(" has_main)
    if(has_main EQUAL -1)
      set(content "#include <adjoint/adjoint.h>\n#include <adjoint/nn.h>\n#include <adjoint/optim.h>\n#include <iostream>\nusing namespace adjoint;\nint main() {\n#line ${line} \"${source}\"\n${code}}\n")
    else()
      set(content "#line ${line} \"${source}\"\n${code}")
      list(APPEND programs ${name})
    endif()
    file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/doc_blocks/${name}.cpp CONTENT "${content}"
         @ONLY)
    add_executable(${name} ${CMAKE_CURRENT_BINARY_DIR}/doc_blocks/${name}.cpp)
    target_link_libraries(${name} PRIVATE adjoint::adjoint)
    # Fragments leave results unused; the README shows them for the reader.
    target_compile_options(${name} PRIVATE -Wall -Wno-unused-variable -Wno-unused-but-set-variable)
  endwhile()
  if(n EQUAL 0)
    message(FATAL_ERROR "${source} has no ```cpp block: test_readme would check nothing")
  endif()
  foreach(p ${programs})
    list(APPEND ADJOINT_DOC_PROGRAMS $<TARGET_FILE:${p}>)
  endforeach()
  set(ADJOINT_DOC_PROGRAMS ${ADJOINT_DOC_PROGRAMS} PARENT_SCOPE)
endfunction()

adjoint_doc_blocks(${PROJECT_SOURCE_DIR}/README.md readme_block)
adjoint_doc_blocks(${PROJECT_SOURCE_DIR}/docs/coming-from-libtorch.md libtorch_block)
add_test(NAME test_readme
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_programs.sh ${ADJOINT_DOC_PROGRAMS})
set_tests_properties(test_readme PROPERTIES LABELS unit TIMEOUT 300)
