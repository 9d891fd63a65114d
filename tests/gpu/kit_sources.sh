# The files a build of kinfer reads, one path a line, sorted: every file of the checkout but the
# tests, scripts, tools, documents, the demo model, build folders and the GPU kit. pack_kit.sh
# hashes them into the kit; run.sh uses the kit's binaries only when the tree it runs in has the
# same list with the same bytes (a file added since, which a CMake glob would build, counts too).
# Sourced from the checkout's root by both.
kit_source_files() {
    find . \( -path ./.git -o -path './build*' -o -path ./.gpu-kit -o -path ./.cache -o -path ./tests \
        -o -path ./docs -o -path ./tools -o -path ./scripts -o -path ./models -o -path ./.ci \
        -o -name __pycache__ \) -prune -o -type f ! -name '*.md' ! -name '*.tmp' -print | LC_ALL=C sort
}
