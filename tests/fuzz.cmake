# Fuzz targets (tests/fuzz/README.md). In the ordinary build each links
# replay_main.cc and ctest replays its seeds, fixed mutations of them and
# its corpus directory; with -DMYCEL_FUZZ=ON (tests/fuzz/fuzz.sh) each links
# libFuzzer instead, and the whole build is instrumented.
#
# mycel_fuzz(NAME DEPS ... [SRCS ...] [MUTATIONS n])
function(mycel_fuzz name)
  cmake_parse_arguments(ARG "" "MUTATIONS" "DEPS;SRCS" ${ARGN})
  set(dir ${PROJECT_SOURCE_DIR}/tests/fuzz)
  if(MYCEL_FUZZ)
    add_executable(${name} ${dir}/${name}.cc ${dir}/quiet_logs.cc
      ${dir}/fuzzer_init.cc ${ARG_SRCS})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${name} ${dir}/${name}.cc ${dir}/quiet_logs.cc
      ${dir}/replay_main.cc ${ARG_SRCS})
  endif()
  mycel_compile_options(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} mycel_runtime
    PkgConfig::PROTOBUF)
  if(MYCEL_FUZZ)
    return()
  endif()
  if(NOT ARG_MUTATIONS)
    set(ARG_MUTATIONS 200)
  endif()
  set(args --mutations ${ARG_MUTATIONS})
  if(EXISTS ${dir}/corpus/${name})
    list(APPEND args ${dir}/corpus/${name})
  endif()
  add_test(NAME ${name} COMMAND ${name} ${args})
  set_tests_properties(${name} PROPERTIES LABELS "unit;fuzz" TIMEOUT 300)
endfunction()

mycel_fuzz(gossip_fuzz DEPS mycel_membership MUTATIONS 1000)
# Each input opens a new database.
mycel_fuzz(replication_fuzz DEPS mycel_replication mycel_store MUTATIONS 100)
# Each query builds its relations and may run to its time limit.
mycel_fuzz(query_fuzz DEPS mycel_store MUTATIONS 40)
# The seccomp filters run in the unit tests' BPF interpreter.
mycel_fuzz(cells_fuzz DEPS mycel_cells MUTATIONS 2000
  SRCS ${PROJECT_SOURCE_DIR}/tests/unit/runtime/seccomp/bpf_interpreter.cc)
mycel_fuzz(parsers_fuzz DEPS mycel_pki mycel_store mycel_json_text
  PkgConfig::NLOHMANN_JSON MUTATIONS 2000)
