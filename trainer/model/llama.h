// Everything a trainer needs from the model component: config, the causal LM, the loss and LoRA.
#pragma once

#include "trainer/model/causal_lm.h"
#include "trainer/model/lora.h"
#include "trainer/model/loss.h"
#include "trainer/model/model_config.h"
