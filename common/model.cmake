# Models: config.json parsing, the tensor lists of the three architectures, the
# safetensors reader, the model-folder loader and synthetic weights.
# Included from common/CMakeLists.txt.
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_package(nlohmann_json CONFIG REQUIRED)
endif()

add_library(ws_model STATIC
  ${CMAKE_CURRENT_LIST_DIR}/model_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_tensors.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_loader.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_synthetic.cc)
target_include_directories(ws_model PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(ws_model
  PUBLIC ws_common absl::status absl::statusor absl::strings absl::flat_hash_map
         absl::flat_hash_set absl::time
  PRIVATE nlohmann_json::nlohmann_json absl::str_format OpenMP::OpenMP_CXX)

if(WS_BUILD_BENCHMARKS)
  # Loading time and resident memory of one worker's weights (folder or synthetic).
  add_executable(model_load_bench ${CMAKE_CURRENT_LIST_DIR}/bench/model_load_bench.cc)
  target_link_libraries(model_load_bench PRIVATE ws_model absl::flags absl::flags_parse
                        absl::str_format absl::time)
endif()
