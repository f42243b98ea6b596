# mycel_library(NAME SRCS ... DEPS ...)
#   A static library whose include root is the repository root, so headers
#   are included as "runtime/status.h".
# mycel_test(NAME SRCS ... DEPS ... [LABELS ...] [TIMEOUT s])
#   A doctest executable registered with ctest. Labels select tiers:
#   unit, integration, e2e.

set(MYCEL_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND MYCEL_WARNINGS -Wthread-safety)
endif()
if(MYCEL_WERROR)
  list(APPEND MYCEL_WARNINGS -Werror)
endif()

function(mycel_compile_options target)
  target_compile_options(${target} PRIVATE ${MYCEL_WARNINGS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
endfunction()

function(mycel_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  mycel_compile_options(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

function(mycel_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS} ${PROJECT_SOURCE_DIR}/tests/doctest_main.cc)
  mycel_compile_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_compile_definitions(${name} PRIVATE
    MYCEL_BINARY_DIR="${PROJECT_BINARY_DIR}"
    MYCEL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  # doctest's own exit code 77 is not used; a binary whose requirements the
  # host does not meet (MYCEL_TEST_REQUIRES, tests/testing/requires.h)
  # prints why and returns 77, which ctest reports as skipped.
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}"
                       TIMEOUT ${ARG_TIMEOUT} SKIP_RETURN_CODE 77)
endfunction()

# mycel_proto_library(NAME ROOT dir PROTOS a.proto ...)
#   Generates C++ messages and gRPC stubs for PROTOS (paths relative to
#   ROOT) into the build tree and compiles them into a static library.
function(mycel_proto_library name)
  cmake_parse_arguments(ARG "" "ROOT" "PROTOS;DEPS" ${ARGN})
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/gen)
  set(srcs)
  foreach(proto ${ARG_PROTOS})
    string(REGEX REPLACE "\\.proto$" "" base ${proto})
    set(out
      ${gen_dir}/${base}.pb.cc ${gen_dir}/${base}.pb.h
      ${gen_dir}/${base}.grpc.pb.cc ${gen_dir}/${base}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}
      COMMAND ${PROTOC}
        --proto_path=${ARG_ROOT}
        --proto_path=${PROJECT_SOURCE_DIR}/proto
        --cpp_out=${gen_dir}
        --grpc_out=${gen_dir}
        --plugin=protoc-gen-grpc=${GRPC_CPP_PLUGIN}
        ${ARG_ROOT}/${proto}
      DEPENDS ${ARG_ROOT}/${proto}
      COMMENT "protoc ${proto}")
    list(APPEND srcs ${gen_dir}/${base}.pb.cc ${gen_dir}/${base}.grpc.pb.cc)
  endforeach()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${gen_dir})
  target_link_libraries(${name} PUBLIC PkgConfig::GRPCPP PkgConfig::PROTOBUF ${ARG_DEPS})
endfunction()
