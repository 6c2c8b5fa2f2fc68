# src/backends/vulkan/vulkan_shaders.cmake — compiles the compute shaders (shaders/*.comp, GLSL 450) to
# SPIR-V with glslc and embeds them into a target: one generated .cpp holding every shader's words
# and a table name -> words (vk_shaders.h). A typed shader gets one variant per weight type
# (mul_mat_q4_0 ... compiled with -DA_TYPE_Q4_0); mul_mat also one with subgroup reductions
# (mul_mat_sg_q4_0 ..., -DUSE_SUBGROUP) for the devices that have them; mul_mm is mul_mat's tiled form.
# set_rows_quant gets one per quantized KV cache type (set_rows_quant_q8_0, set_rows_quant_q4_0).
set(WEFT_VK_SHADER_DIR ${CMAKE_CURRENT_LIST_DIR}/shaders)
set(WEFT_VK_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_spirv.cmake)

function(weft_vulkan_embed_shaders target glslc)
    set(plain binary unary glu norm soft_max rope cpy set_rows attention)
    set(typed mul_mat mul_mm get_rows)
    set(types f32 f16 q8_0 q4_0 q4_k q6_k)
    set(cache_typed set_rows_quant)
    set(cache_types q8_0 q4_0)
    file(GLOB includes ${WEFT_VK_SHADER_DIR}/*.glsl)
    set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/vulkan_shaders)
    file(MAKE_DIRECTORY ${out_dir})
    set(names)
    set(spvs)
    foreach(shader ${plain} ${typed} ${cache_typed})
        set(variants "")
        if(shader IN_LIST cache_typed)
            foreach(t ${cache_types})
                list(APPEND variants "${shader}_${t}")
            endforeach()
        elseif(shader IN_LIST typed)
            foreach(t ${types})
                list(APPEND variants "${shader}_${t}")
                if(shader STREQUAL "mul_mat")
                    list(APPEND variants "${shader}_sg_${t}")
                endif()
            endforeach()
        else()
            set(variants ${shader})
        endif()
        foreach(name ${variants})
            set(defines)
            if(NOT name STREQUAL shader)
                string(REPLACE "${shader}_" "" t ${name})
                if(t MATCHES "^sg_")
                    string(REPLACE "sg_" "" t ${t})
                    list(APPEND defines -DUSE_SUBGROUP)
                endif()
                string(TOUPPER ${t} t)
                list(APPEND defines -DA_TYPE_${t})
            endif()
            set(spv ${out_dir}/${name}.spv)
            add_custom_command(
                OUTPUT ${spv}
                COMMAND ${glslc} --target-env=vulkan1.1 -O ${defines} -I ${WEFT_VK_SHADER_DIR}
                        -o ${spv} ${WEFT_VK_SHADER_DIR}/${shader}.comp
                DEPENDS ${WEFT_VK_SHADER_DIR}/${shader}.comp ${includes}
                COMMENT "glslc ${name}.spv" VERBATIM)
            list(APPEND names ${name})
            list(APPEND spvs ${spv})
        endforeach()
    endforeach()
    string(REPLACE ";" "|" names_arg "${names}")
    set(generated ${out_dir}/vk_shaders_embedded.cpp)
    add_custom_command(
        OUTPUT ${generated}
        COMMAND ${CMAKE_COMMAND} -DOUTPUT=${generated} -DDIR=${out_dir} -DNAMES=${names_arg}
                -P ${WEFT_VK_EMBED_SCRIPT}
        DEPENDS ${spvs} ${WEFT_VK_EMBED_SCRIPT}
        COMMENT "embedding ${target}'s SPIR-V" VERBATIM)
    target_sources(${target} PRIVATE ${generated})
endfunction()
