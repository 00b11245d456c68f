add_library(loom_warnings INTERFACE)
target_compile_options(loom_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${LOOM_WERROR}>>:-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${LOOM_WERROR}>>:-Werror=all-warnings>)

if(LOOM_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=address,undefined)
endif()

# ThreadSanitizer: the MPI itself is not instrumented; what it reports from
# inside the MPI is silenced by scripts/tsan.supp.
if(LOOM_TSAN)
  if(LOOM_SANITIZE)
    message(FATAL_ERROR "LOOM_TSAN and LOOM_SANITIZE exclude each other")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=thread>
                      $<$<COMPILE_LANGUAGE:CXX,C>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
endif()
