# Runs the Kubernetes types' generator on a copy of operator/kube/kube_types.json where Pod lists a
# field its schema lacks ("nodeNmae"), and expects a refusal that names it; then on the list as it
# is, and expects success.
file(READ ${LIST} list)
string(REPLACE "\"spec\", \"status\"]}" "\"spec\", \"status\", \"nodeNmae\"]}" broken "${list}")
if(broken STREQUAL list)
  message(FATAL_ERROR "the test could not find Pod's field list to break")
endif()
get_filename_component(list_dir ${LIST} DIRECTORY)
file(COPY ${list_dir}/openapi DESTINATION ${OUT}/kube_types_refuse)  # the documents, beside it
set(broken_list ${OUT}/kube_types_refuse/kube_types.json)
file(WRITE ${broken_list} "${broken}")
execute_process(COMMAND ${GENERATOR} ${broken_list} ${OUT}/broken.h ${OUT}/broken.cpp
  RESULT_VARIABLE code ERROR_VARIABLE refusal)
if(code EQUAL 0 OR NOT refusal MATCHES "Pod.nodeNmae: the schema io.k8s.api.core.v1.Pod has no such field")
  message(FATAL_ERROR "expected a refusal naming Pod.nodeNmae, got ${code}: ${refusal}")
endif()
execute_process(COMMAND ${GENERATOR} ${LIST} ${OUT}/ok.h ${OUT}/ok.cpp RESULT_VARIABLE code
  ERROR_VARIABLE error)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the list as it is was refused: ${error}")
endif()
message(STATUS "refused: ${refusal}")
