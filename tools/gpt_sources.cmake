# The sources of the trainer library (adjoint_gpt), in one list: tools/CMakeLists.txt builds
# them, and fuzz/CMakeLists.txt builds them again, instrumented, for the loader target.
set(ADJOINT_GPT_SOURCES gpt_trainer.cpp run_state.cpp loss_log.cpp gradient_health.cpp
                        gradient_plot.cpp train_flags.cpp memory_estimate.cpp)
