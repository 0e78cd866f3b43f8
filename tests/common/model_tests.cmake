# Model loading tests (config.json, safetensors, folder loader, synthetic weights,
# the generated reference fixtures). Included from tests/common/CMakeLists.txt.
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_package(nlohmann_json CONFIG REQUIRED)
endif()

ws_add_test(model_config_test SOURCES model_config_test.cc
  LIBS ws_model nlohmann_json::nlohmann_json)
target_compile_definitions(model_config_test PRIVATE
  WS_SHARED_MODELS_DIR="${PROJECT_SOURCE_DIR}/../shared/models")
ws_add_test(safetensors_test SOURCES safetensors_test.cc
  LIBS ws_model nlohmann_json::nlohmann_json)
ws_add_test(model_loader_test SOURCES model_loader_test.cc
  LIBS ws_model nlohmann_json::nlohmann_json)
ws_add_test(model_synthetic_test SOURCES model_synthetic_test.cc
  LIBS ws_model nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX)
ws_add_test(model_fixture_test SOURCES model_fixture_test.cc
  LIBS ws_model nlohmann_json::nlohmann_json)
target_compile_definitions(model_fixture_test PRIVATE
  WS_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures")
