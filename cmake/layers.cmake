# Layering held by the build (docs/ARCHITECTURE.md "Layers": dependencies point down only).
# Headers of src/<folder> are included as "<folder>/name.h" through
# ${PROJECT_BINARY_DIR}/layers/<folder>, a directory holding nothing but a link to that one
# folder. bx_layer(<target> <folder>) gives it to the target and, through PUBLIC, to whatever
# links the target: a layer therefore sees exactly the layers it links (those below it), and an
# include of a layer above fails to compile.
function(bx_layer target folder)
  set(root ${PROJECT_BINARY_DIR}/layers/${folder})
  if(NOT EXISTS ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
endfunction()
