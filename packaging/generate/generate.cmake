# The .deb's generated documentation (included by packaging/CMakeLists.txt): man pages and bash
# completion made at build time from the programs' own `--dump-options` (every subcommand and
# option, apps/cli_support/cli_description.h) and the job-file page from docs/job-file.md, by the
# scripts beside this file (Debian's /usr/bin/python3, no pandoc or help2man). They cannot drift:
# a new flag is in the man page and the completion of the next build. Gzipped as Debian wants
# (gzip -n9). tests/integration/test_cli_docs.cpp checks every option is in both.
set(RAVNEST_PYTHON3 /usr/bin/python3 CACHE FILEPATH
    "Python 3 that runs packaging/generate/ (the standard library only)")
set(RAVNEST_PACKAGE_MAINTAINER "ravnest maintainers <maintainers@ravnest.invalid>" CACHE STRING
    "The .deb's Maintainer and the changelog's signer: Name <address>")
set(ravnest_generate_dir ${CMAKE_CURRENT_SOURCE_DIR}/generate)
set(ravnest_generated ${CMAKE_CURRENT_BINARY_DIR}/generated)
# The pages' date: SOURCE_DATE_EPOCH when set (reproducible builds), else the day of configure.
string(TIMESTAMP ravnest_man_date "%Y-%m-%d" UTC)

add_custom_command(
  OUTPUT ${ravnest_generated}/ravnest-options.json ${ravnest_generated}/ravnestd-options.json
  COMMAND ${CMAKE_COMMAND} -E make_directory ${ravnest_generated}
  COMMAND sh -c "\"$1\" --dump-options > \"$2\"" sh $<TARGET_FILE:ravnest>
          ${ravnest_generated}/ravnest-options.json
  COMMAND sh -c "\"$1\" --dump-options > \"$2\"" sh $<TARGET_FILE:ravnestd>
          ${ravnest_generated}/ravnestd-options.json
  DEPENDS ravnest ravnestd
  COMMENT "the command lines of ravnest and ravnestd as JSON"
  VERBATIM)

set(ravnest_options_json ${ravnest_generated}/ravnest-options.json
    ${ravnest_generated}/ravnestd-options.json)
add_custom_command(
  OUTPUT ${ravnest_generated}/man.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${ravnest_generated}/man
  COMMAND ${RAVNEST_PYTHON3} -B ${ravnest_generate_dir}/cli_man.py ${ravnest_options_json}
          ${ravnest_generated}/man ${PROJECT_VERSION} ${ravnest_man_date}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${ravnest_generated}/man/man5
  COMMAND ${RAVNEST_PYTHON3} -B ${ravnest_generate_dir}/md_man.py
          ${CMAKE_SOURCE_DIR}/docs/job-file.md ${ravnest_generated}/man/man5/ravnest-job.5.gz
          ravnest-job 5 "the job file of ravnest train (TOML)" ${PROJECT_VERSION}
          ${ravnest_man_date}
  COMMAND ${CMAKE_COMMAND} -E touch ${ravnest_generated}/man.stamp
  DEPENDS ${ravnest_options_json} ${ravnest_generate_dir}/cli_man.py
          ${ravnest_generate_dir}/md_man.py ${ravnest_generate_dir}/roff.py
          ${CMAKE_SOURCE_DIR}/docs/job-file.md
  COMMENT "man pages: ravnest(1), ravnest-COMMAND(1), ravnest-job(5), ravnestd(8)"
  VERBATIM)
add_custom_command(
  OUTPUT ${ravnest_generated}/ravnest.bash-completion
  COMMAND ${RAVNEST_PYTHON3} -B ${ravnest_generate_dir}/completion.py ${ravnest_options_json}
          ${ravnest_generated}/ravnest.bash-completion
  DEPENDS ${ravnest_options_json} ${ravnest_generate_dir}/completion.py
  COMMENT "bash completion of ravnest and ravnestd"
  VERBATIM)
add_custom_target(ravnest_generated_docs ALL DEPENDS ${ravnest_generated}/man.stamp
                  ${ravnest_generated}/ravnest.bash-completion)

install(DIRECTORY ${ravnest_generated}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR})
foreach(program ravnest ravnestd)
  install(FILES ${ravnest_generated}/ravnest.bash-completion
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ${program})
endforeach()

# Examples a user starts from: the example scripts and jobs, the job files and the node pool.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        USE_SOURCE_PERMISSIONS)
file(GLOB ravnest_example_jobs ${CMAKE_SOURCE_DIR}/configs/job_*.toml)
install(FILES ${ravnest_example_jobs} ${CMAKE_SOURCE_DIR}/configs/node_configs.json
        ${CMAKE_SOURCE_DIR}/configs/node_configs.toml
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# Debian's copyright file (machine-readable) and the changelog, gzipped as lintian asks.
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/deb/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/deb/changelog.in ${ravnest_generated}/changelog @ONLY)
add_custom_command(
  OUTPUT ${ravnest_generated}/changelog.gz
  COMMAND sh -c "gzip -n9 -c \"$1\" > \"$2\"" sh ${ravnest_generated}/changelog
          ${ravnest_generated}/changelog.gz
  DEPENDS ${ravnest_generated}/changelog
  COMMENT "changelog.gz"
  VERBATIM)
add_custom_target(ravnest_changelog ALL DEPENDS ${ravnest_generated}/changelog.gz)
install(FILES ${ravnest_generated}/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
